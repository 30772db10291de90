//! The `fencelog` binary: parse the command line and hand it to the library. It is built only
//! with the `cli` feature (on by default), which brings the command line's dependencies.

use clap::Parser;

/// jemalloc rather than the system allocator, for the binary. Per request the server allocates a
/// read buffer as large as the frame (a produce of 1 MiB, say) and frees it once the batch is
/// appended; glibc hands such freed memory back to the kernel, so the next request faults in
/// fresh pages: about a fifth of the server's CPU time in a 1 KiB x 1000 produce run on a
/// 2-core VM, where a first touch also costs the hypervisor a fault (docs/benchmarks.md).
/// jemalloc keeps freed memory for reuse for a few seconds before returning it.
#[cfg(all(target_os = "linux", not(fencelog_loom)))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cli = match fencelog::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print and succeed; a usage error is an error like any other
        // (exit status 1, as the CLI contract says, not clap's default 2; JSON with --json).
        Err(error) => std::process::exit(fencelog::cli::report_parse_error(&error)),
    };
    std::process::exit(fencelog::cli::run(cli));
}
