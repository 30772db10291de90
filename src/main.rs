//! The `fencelog` binary: parse the command line and hand it to the library.

use clap::Parser;

fn main() {
    let cli = match fencelog::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print and succeed; a usage error is an error like any other
        // (exit status 1, as the CLI contract says), not clap's default 2.
        Err(error) => {
            let status = if error.use_stderr() {
                fencelog::cli::EXIT_ERROR
            } else {
                fencelog::cli::EXIT_OK
            };
            let _ = error.print();
            std::process::exit(status);
        }
    };
    std::process::exit(fencelog::cli::run(cli));
}
