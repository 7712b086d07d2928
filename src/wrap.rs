//! The stdio MCP wrapper (being written).

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct WrapArgs {}

pub fn main(_args: WrapArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("the wrapper is not built yet")
}
