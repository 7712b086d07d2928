//! Shared test support: a random valid-trace generator and a brute-force reference of the
//! decision rule.

// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

pub mod gen;
pub mod reference;
