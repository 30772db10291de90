//! `--help` as a newcomer reads it: every command, `serve` included, ends with full example
//! command lines, and no usage line shows an option that has a default as if it were required.

use std::process::Command;

use crate::support::BIN;

/// `fencelog ARGS --help`, which must succeed.
fn help(path: &[String]) -> String {
    let output = Command::new(BIN)
        .args(path)
        .arg("--help")
        .env_remove("FENCELOG_ADDR")
        .output()
        .expect("run fencelog --help");
    assert!(output.status.success(), "{path:?} --help failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command path, depth first: `[]`, `["serve"]`, `["topic"]`, `["topic", "create"]`, ...
fn every_command() -> Vec<(Vec<String>, String)> {
    let mut found = Vec::new();
    let mut pending = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let text = help(&path);
        for name in subcommands(&text) {
            let mut child = path.clone();
            child.push(name);
            pending.push(child);
        }
        found.push((path, text));
    }
    found
}

#[test]
fn every_command_help_ends_with_full_example_command_lines() {
    // Proves: `fencelog --help` and every subcommand's `--help` (all of them, found by walking
    // the `Commands:` lists, so a new command cannot be missed) have an `Examples:` section
    // whose lines are full `fencelog ...` command lines naming that command.
    let commands = every_command();
    assert!(
        commands.len() > 20,
        "only {} commands found",
        commands.len()
    );
    for (path, text) in &commands {
        let examples = text
            .split_once("Examples:\n")
            .unwrap_or_else(|| {
                panic!(
                    "`fencelog {} --help` has no Examples: section:\n{text}",
                    path.join(" ")
                )
            })
            .1;
        let invoked = format!("fencelog {}", path.join(" "));
        assert!(
            examples
                .lines()
                .any(|line| line.contains(invoked.trim_end())),
            "`{invoked} --help` shows no example of itself:\n{examples}"
        );
    }
    let names: Vec<String> = commands.iter().map(|(path, _)| path.join(" ")).collect();
    for expected in [
        "serve",
        "topic delete",
        "topic delete-records",
        "lease renew",
        "acl list",
    ] {
        assert!(
            names.iter().any(|name| name == expected),
            "{expected} not walked: {names:?}"
        );
    }
}

/// The `--flags` whose description (in long help, on the lines after the flag) has a default.
fn defaulted_flags(text: &str) -> Vec<String> {
    let mut flags = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('-') {
            current = trimmed
                .split_whitespace()
                .find(|word| word.starts_with("--"))
                .map(|word| word.trim_end_matches(',').to_owned());
        }
        if line.contains("[default:") {
            if let Some(flag) = current.take() {
                flags.push(flag);
            }
        }
    }
    flags
}

#[test]
fn usage_lines_do_not_show_defaulted_options_as_required() {
    // Proves: no usage line names an option that has a default outside `[OPTIONS]` (a
    // newcomer reads what the usage line spells out as required), and the `topic` summary
    // names every topic subcommand.
    let mut checked = 0;
    for (path, text) in every_command() {
        let usage = text
            .lines()
            .find(|line| line.starts_with("Usage:"))
            .unwrap_or_else(|| panic!("{path:?}: no usage line"));
        for flag in defaulted_flags(&text) {
            checked += 1;
            assert!(
                !usage.contains(&format!("{flag} ")),
                "`fencelog {}`: usage line shows {flag}, which has a default: {usage}",
                path.join(" ")
            );
        }
    }
    assert!(
        checked > 20,
        "only {checked} defaulted options found: is the parsing right?"
    );
    let top = help(&[]);
    let topic = top
        .lines()
        .find(|line| line.trim_start().starts_with("topic "))
        .expect("topic in the command list");
    for subcommand in subcommands(&help(&["topic".to_owned()])) {
        assert!(
            topic.contains(&subcommand),
            "topic summary lacks {subcommand}: {topic}"
        );
    }
}
