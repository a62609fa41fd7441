//! `foothold-build`: argument parsing only.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "foothold-build",
    version,
    about = "Build Foothold bootable media from an appliance spec (not yet implemented beyond --version)"
)]
struct Cli {}

fn main() {
    let _ = Cli::parse();
    eprintln!(
        "foothold-build {}: no build phases yet; see the image-builder issue",
        foothold_image_builder::VERSION
    );
    std::process::exit(2);
}
