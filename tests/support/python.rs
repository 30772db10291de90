//! What the tests that run Python Kafka clients share: whether a client's module is installed
//! (the tests skip, with a note, where it is not; `.ci/run` installs them best effort).

use std::process::Command;

/// True (with a note on stderr) where `python3` cannot import `module`.
pub fn python_module_missing(module: &str) -> bool {
    let found = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        eprintln!("python3 module {module} not found: skipping (pip install it)");
    }
    !found
}
