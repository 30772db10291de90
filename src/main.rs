//! The `fencelog` binary: parse the command line and hand it to the library.

use clap::Parser;

fn main() {
    let cli = fencelog::cli::Cli::parse();
    std::process::exit(fencelog::cli::run(cli));
}
