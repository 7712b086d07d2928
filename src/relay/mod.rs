//! The transparent relay (being written).

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct RelayArgs {}

pub fn main(_args: RelayArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the relay is not built yet")
}
