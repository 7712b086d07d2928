//! Fake model streams: the Anthropic Messages and OpenAI Responses events the tests, benches
//! and the scripted upstream send, and their Server-Sent Events records.
//!
//! The events are `serde_json::Value`s shaped as the real APIs send them (protocols.md);
//! a record is `event: <type>\ndata: <json>\n\n`, the event's name being its `type`.

use serde_json::{json, Value};

/// One SSE record with a JSON payload under the event name `name`.
pub fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// One SSE record named after the event's own `type` (`message` when it has none).
pub fn record(ev: &Value) -> String {
    event(ev["type"].as_str().unwrap_or("message"), ev)
}

/// The SSE records of `events`, one string each.
pub fn records(events: &[Value]) -> Vec<String> {
    events.iter().map(record).collect()
}

/// The SSE records of `events` as one body.
pub fn body(events: &[Value]) -> String {
    events.iter().map(record).collect()
}

// ---------------------------------------------------------------------------------------
// Anthropic Messages
// ---------------------------------------------------------------------------------------

/// The `message_start` event of message `id` from `model`.
pub fn message_start(id: &str, model: &str) -> Value {
    json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant","content":[],"model":model,"stop_reason":null,"usage":{"input_tokens":1,"output_tokens":1}}})
}

/// An Anthropic message under construction: its events so far and the next block index.
pub struct Message {
    events: Vec<Value>,
    index: usize,
}

/// A message `id` from `model`: its `message_start`, blocks to follow.
pub fn message(id: &str, model: &str) -> Message {
    Message {
        events: vec![message_start(id, model)],
        index: 0,
    }
}

impl Message {
    /// A block whose start is `block`, with `deltas` (each a `delta` object) before its stop.
    pub fn block(mut self, block: Value, deltas: &[Value]) -> Self {
        let index = self.index;
        self.events
            .push(json!({"type":"content_block_start","index":index,"content_block":block}));
        for d in deltas {
            self.events
                .push(json!({"type":"content_block_delta","index":index,"delta":d}));
        }
        self.events
            .push(json!({"type":"content_block_stop","index":index}));
        self.index += 1;
        self
    }

    /// A text block streaming `text` in one delta.
    pub fn text(self, text: &str) -> Self {
        self.block(
            json!({"type":"text","text":""}),
            &[json!({"type":"text_delta","text":text})],
        )
    }

    /// A `tool_use` block `id` calling `name`, its input streamed as `input_json` in one
    /// delta, or no delta at all when `None`.
    pub fn tool_use(self, id: &str, name: &str, input_json: Option<&str>) -> Self {
        let deltas: Vec<Value> = input_json
            .map(|j| json!({"type":"input_json_delta","partial_json":j}))
            .into_iter()
            .collect();
        self.block(
            json!({"type":"tool_use","id":id,"name":name,"input":{}}),
            &deltas,
        )
    }

    /// The events so far, the message left open.
    pub fn open(self) -> Vec<Value> {
        self.events
    }

    /// The whole message: its `message_delta` (`stop_reason`, `output_tokens`) and
    /// `message_stop` appended.
    pub fn end(mut self, stop_reason: &str, output_tokens: u64) -> Vec<Value> {
        self.events.extend([
            json!({"type":"message_delta","delta":{"stop_reason":stop_reason,"stop_sequence":null},"usage":{"output_tokens":output_tokens}}),
            json!({"type":"message_stop"}),
        ]);
        self.events
    }
}

/// A Claude turn as SSE records: one `tool_use` block per `(id, name)` (no input delta), or
/// the text `done` when there is none.
pub fn claude_turn(id: &str, calls: &[(&str, &str)]) -> Vec<String> {
    let mut m = message(id, "claude");
    for (call, name) in calls {
        m = m.tool_use(call, name, None);
    }
    let events = if calls.is_empty() {
        m.text("done").end("end_turn", 2)
    } else {
        m.end("tool_use", 2)
    };
    records(&events)
}

// ---------------------------------------------------------------------------------------
// OpenAI Responses
// ---------------------------------------------------------------------------------------

/// `response.created` for response `id` (in progress, no output yet).
pub fn response_created(id: &str) -> Value {
    json!({"type":"response.created","response":{"id":id,"status":"in_progress","output":[]}})
}

/// `response.completed` for response `id` with its `output` items.
pub fn response_completed(id: &str, output: Value) -> Value {
    json!({"type":"response.completed","response":{"id":id,"status":"completed","output":output}})
}

/// `response.output_item.added` of `item` at `index`.
pub fn item_added(index: usize, item: &Value) -> Value {
    json!({"type":"response.output_item.added","output_index":index,"item":item})
}

/// `response.output_item.done` of `item` at `index`.
pub fn item_done(index: usize, item: &Value) -> Value {
    json!({"type":"response.output_item.done","output_index":index,"item":item})
}

/// A completed `function_call` item `id` for `call_id`, calling `namespace`'s `name`.
pub fn function_call(
    id: &str,
    call_id: &str,
    namespace: &str,
    name: &str,
    arguments: &str,
) -> Value {
    json!({"type":"function_call","id":id,"call_id":call_id,"namespace":namespace,"name":name,"arguments":arguments,"status":"completed"})
}

/// A response that calls `item`: created, the item added and done, completed with it.
pub fn function_call_response(id: &str, item: &Value) -> Vec<Value> {
    vec![
        response_created(id),
        item_added(0, item),
        item_done(0, item),
        response_completed(id, json!([item])),
    ]
}

/// `ev` with its `sequence_number` set to `n`, as the HTTP stream numbers its events.
pub fn numbered(mut ev: Value, n: u64) -> Value {
    ev["sequence_number"] = json!(n);
    ev
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claude_tool_turn_is_the_api_s_event_sequence() {
        let types: Vec<String> = message("msg_1", "claude")
            .text("hi")
            .tool_use("toolu_1", "echo", Some("{}"))
            .end("tool_use", 5)
            .iter()
            .map(|e| format!("{}@{}", e["type"].as_str().unwrap(), e["index"]))
            .collect();
        assert_eq!(
            types,
            [
                "message_start@null",
                "content_block_start@0",
                "content_block_delta@0",
                "content_block_stop@0",
                "content_block_start@1",
                "content_block_delta@1",
                "content_block_stop@1",
                "message_delta@null",
                "message_stop@null",
            ]
        );
        assert_eq!(
            record(&json!({"type":"message_stop"})),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
    }
}
