//! Running a benchmark binary again under callgrind, for an instruction
//! count: shared by the instruction-count benches here and by the
//! limitador and tower-rate-limiter comparisons (`benches/limitador`,
//! `benches/tower-rate-limiter`, which include this file).

use std::process::Command;

/// Instructions callgrind collected inside the functions named `measured`
/// in one run of this same binary with `child_var` set to `spec` (the
/// child reads it and runs that subject).
pub(crate) fn collected(child_var: &str, spec: &str) -> u64 {
    let out = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--toggle-collect=*measured*",
            "--callgrind-out-file=/dev/null",
        ])
        .arg(std::env::current_exe().expect("own path"))
        .env(child_var, spec)
        .output()
        .expect("valgrind runs (is it installed?)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{spec}: {stderr}");
    stderr
        .lines()
        .find_map(|l| {
            l.split_once("Collected :")
                .map(|(_, n)| n.trim().to_owned())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `Collected :` line from callgrind: {stderr}"))
}
