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
    for (net, policy) in [("LAN-1", "none"), ("LAN-1", "speculative"), ("LAN", "none"), ("LAN", "speculative")] {
        // Without --congestion, these networks run without congestion control only.
        let row = format!("{net:<6} {policy:<23} none ");
        let rate = put_rate(&out, &row);
        assert!(rate > 0.0, "{row}: {rate}");
        assert!(!out.contains(&format!("{net:<6} {policy:<23} swift")), "{out}");
    }
    assert!(out.contains("never invalidated"), "the none policy never invalidates:\n{out}");
    assert!(!out.contains("Switch ports"), "no ports on the LAN:\n{out}");
}

/// The PUT/s column of the PUTs table's row that starts with `row`.
fn put_rate(out: &str, row: &str) -> f64 {
    let line = out.lines().find(|l| l.starts_with(row)).unwrap_or_else(|| panic!("no {row:?} row:\n{out}"));
    line.split_whitespace().nth(4).and_then(|v| v.parse().ok()).expect("a PUT/s column")
}

/// The incast runs with and without Swift by default; without, the ports pause their
/// senders.
#[test]
fn the_incast_cells_run_with_and_without_swift_and_report_the_ports() {
    let out = stdout_of(&["bench", "cluster", "--quick", "--networks", "incast", "--policies", "none"]);
    for heading in [
        "Switch ports toward the 5 nodes",
        "incast none none PUT p99.9 (no control: shown)",
        "incast none swift PUT p99.9 (target <= 2x p50)",
        "incast none swift PUTs/s (no collapse: target >= 0.9x)",
    ] {
        assert!(out.contains(heading), "no {heading:?} in:\n{out}");
    }
    for cc in ["none ", "swift"] {
        let row = format!("{:<6} {:<23} {cc}", "incast", "none");
        assert!(put_rate(&out, &row) > 0.0, "{out}");
    }
    // The ports table: pauses are the seventh column (the label takes three).
    let ports = out.split("Switch ports").nth(1).expect("a ports table");
    let pauses = |cc: &str| -> u64 {
        let row = format!("{:<6} {:<23} {cc}", "incast", "none");
        let line = ports.lines().find(|l| l.starts_with(&row)).unwrap_or_else(|| panic!("no {row:?}:\n{out}"));
        line.split_whitespace().nth(6).and_then(|v| v.parse().ok()).expect("a pauses column")
    };
    assert!(pauses("none ") > 0, "an uncontrolled incast pauses its senders:\n{out}");
}

#[test]
fn the_cluster_bench_refuses_bad_options_by_name() {
    for (args, needle) in [
        (&["bench", "cluster", "--stripe", "4+2"][..], "--stripe 4+2"),
        (&["bench", "cluster", "--networks", "moon"][..], "moon"),
        (&["bench", "cluster", "--policies", "eager"][..], "eager"),
        (&["bench", "cluster", "--congestion", "bbr"][..], "bbr"),
        (&["bench", "cluster", "--seconds", "0"][..], "--seconds"),
        (&["demo", "--seconds", "0"][..], "--seconds"),
    ] {
        let out = dpu().args(args).output().expect("run prescient-dpu");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(needle) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
