//! The observer side: which exchanges are observed, and `correlator::observe`'s observers
//! driven by the tap's copies. This is the only module that knows the observers' API.

use correlator::EventKind;
use http::HeaderMap;

use super::tap::{StreamObserver, TapMsg};

/// An exchange that will be observed: decided from its request head.
pub struct Plan {
    _private: (),
}

/// Whether `method path` (the path after the mount prefix) is a model stream route, and if so
/// how to observe it.
pub fn plan(_method: &str, _path: &str, _websocket: bool, _headers: &HeaderMap) -> Option<Plan> {
    None
}

impl Plan {
    pub fn open_http(
        self,
        _stream: String,
        _request_encoding: Option<&str>,
        _out: &mut Vec<EventKind>,
    ) -> Box<dyn StreamObserver> {
        Box::new(Nothing)
    }

    pub fn open_ws(
        self,
        _stream: String,
        _extensions: Option<&str>,
        _out: &mut Vec<EventKind>,
    ) -> Box<dyn StreamObserver> {
        Box::new(Nothing)
    }
}

struct Nothing;

impl StreamObserver for Nothing {
    fn take(&mut self, _msg: TapMsg, _out: &mut Vec<EventKind>) {}
    fn lost(&mut self, _reason: &'static str, _out: &mut Vec<EventKind>) {}
    fn close(&mut self, _out: &mut Vec<EventKind>) {}
}
