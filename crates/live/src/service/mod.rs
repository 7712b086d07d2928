//! The relay as a service: the data plane (the `relay` crate) with the live pipeline behind
//! it, started and stopped together; what `windowtap relay` and `windowtap run` share.
//!
//! - [`args`]: the options and the run configuration made from them; [`sinks`]: the record
//!   and capture files.
//! - [`start`]: the correlator task, the OTLP exporter and the ingest socket, then the data
//!   plane feeding them; [`stop`]: signals, the drain and the last records out;
//!   [`summary`]: what the stop says of failed exchanges.

mod args;
mod sinks;
mod start;
mod stop;
mod summary;

pub use args::{key_path, read_key, relay_config, RelayArgs, RelayConfig};
pub use start::{start, Running};
pub use stop::{Signals, Stopped};
pub use summary::{failures_summary, servers_summary};

/// What every relay process sets for itself before it starts (`relay` and `run`): the open
/// files limit and the heap's hold on freed blocks.
pub fn prepare_process() {
    relay::raise_open_files_limit();
    sys::heap::keep_freed_blocks();
}
