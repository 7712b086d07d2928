//! `windowtap replay` (being written).

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct ReplayArgs {}

pub fn main(_args: ReplayArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("replay is not built yet")
}
