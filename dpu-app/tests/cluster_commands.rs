//! Smoke tests of the two commands built on the in-process cluster: `prescient-dpu
//! demo` (the README's main command) and `prescient-dpu bench cluster --quick`. They
//! check that each runs to the end, prints its headings and moved writes; they assert
//! no timing (the figures depend on the machine).

use std::process::Command;

fn dpu() -> Command {
    Command::new(env!("CARGO_BIN_EXE_prescient-dpu"))
}

/// Runs `args`, expecting success; returns stdout.
fn stdout_of(args: &[&str]) -> String {
    let out = dpu().args(args).output().expect("run prescient-dpu");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "prescient-dpu {args:?} failed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stdout.into_owned()
}

/// The number after `label` on the first line that contains it.
fn number_after(text: &str, label: &str) -> f64 {
    let line = text.lines().find(|l| l.contains(label)).unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    let rest = &line[line.find(label).expect("found") + label.len()..];
    let digits: String = rest.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {label:?} in {line:?}"))
}

#[test]
fn the_demo_runs_a_cluster_and_summarises_it() {
    let out = stdout_of(&["demo", "--seconds", "0.5"]);
    for heading in [
        "Prescient demo: 5 nodes",
        "RS(3,2) with quorum 4",
        "write stream:",
        "throughput:",
        "PUT latency",
        "per stage on the writers' DPU apps",
        "put replicate",
        "GETs:",
        "readers:",
        "predictor:",
        "bytes moved",
        "faults during the load:",
    ] {
        assert!(out.contains(heading), "no {heading:?} in:\n{out}");
    }
    assert!(number_after(&out, "throughput:") > 0.0, "{out}");
    assert!(number_after(&out, "put total") > 0.0, "the stage table counted writes:\n{out}");
}

#[test]
fn the_quick_cluster_bench_prints_its_tables_and_moves_writes() {
    let out = stdout_of(&["bench", "cluster", "--quick", "--networks", "lan-1,lan", "--policies", "none,speculative"]);
    for heading in [
        "prescient-dpu bench cluster: 5 nodes",
        "seal + stripe alone, 1 core:",
        "PUTs (host side, submission to completion)",
        "Invalidation: PUT submission",
        "Stale-read window",
        "Readers and predictor",
        "Targets, as ratios of figures measured in this run",
        "LAN-1 speculative PUT p50 (target <= 1.10x)",
        "LAN speculative PUT p50 (loaded: CPU-bound, judged on LAN-1)",
        "PUTs per CPU-second",
    ] {
        assert!(out.contains(heading), "no {heading:?} in:\n{out}");
    }
    for (net, policy) in [("LAN-1", "none "), ("LAN-1", "speculative "), ("LAN", "none "), ("LAN", "speculative ")] {
        let row = format!("{net:<5} {policy}");
        let secs_then_rate =
            out.lines().find(|l| l.starts_with(&row)).unwrap_or_else(|| panic!("no {row:?} row:\n{out}"));
        let rate: f64 = secs_then_rate.split_whitespace().nth(3).and_then(|v| v.parse().ok()).expect("a PUT/s column");
        assert!(rate > 0.0, "{secs_then_rate}");
    }
    assert!(out.contains("never invalidated"), "the none policy never invalidates:\n{out}");
}

#[test]
fn the_cluster_bench_refuses_bad_options_by_name() {
    for (args, needle) in [
        (&["bench", "cluster", "--stripe", "4+2"][..], "--stripe 4+2"),
        (&["bench", "cluster", "--networks", "moon"][..], "moon"),
        (&["bench", "cluster", "--policies", "eager"][..], "eager"),
        (&["bench", "cluster", "--seconds", "0"][..], "--seconds"),
        (&["demo", "--seconds", "0"][..], "--seconds"),
    ] {
        let out = dpu().args(args).output().expect("run prescient-dpu");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(needle) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
