//! WebSocket test support: the test kit's (crates/testkit `ws`), under the path tests name.
#![allow(unused_imports)]

pub use testkit::ws::*;
