//! What every windowtap process shares, whatever its command: the one monotonic clock the
//! relay and the wrapper agree on ([`clock`]), the log and its sanitizing formatter
//! ([`logging`], [`ratelimit`]), standard output that ends quietly when its reader goes
//! ([`stdout`]), the start-up messages that say what to do ([`advice`]), what counts as this
//! machine ([`net`]), and the heap's tuning ([`heap`]).
//!
//! It is also the one place of the workspace where `unsafe` is written: [`libc_calls`] holds
//! the calls into the C library that `rustix` does not cover (the allocator's thresholds, a
//! thread's signal mask and `sigwait`), each behind a safe function with its SAFETY argument.
//! Every other crate is `#![forbid(unsafe_code)]`; here it is denied everywhere but in that
//! module, so a new `unsafe` block anywhere else fails to compile.

#![deny(unsafe_code)]
#![warn(unreachable_pub)]

pub mod advice;
pub mod clock;
pub mod heap;
#[allow(unsafe_code)]
pub mod libc_calls;
pub mod logging;
pub mod net;
pub mod ratelimit;
pub mod stdout;
