//! The `kai` and `kubectl-kai` binaries, run on a snapshot file (no cluster needed).

mod fixtures;

use std::path::PathBuf;
use std::process::{Command, Output};

use fixtures::*;

fn snapshot_file(test: &str) -> PathBuf {
    let yaml = stream(&[
        default_priority_classes(),
        node("node-0", 2, &[]),
        node("node-1", 2, &[]),
        node("node-2", 2, &[]),
        queue("team-a", None, -1.0, -1.0),
        pod_group("ml", "training-job-pg", "team-a", 8, "train"),
        pods("ml", "training-job-pg", 8, 1, &[], None),
    ]);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kai-cli-{test}-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("writing the snapshot file");
    path
}

fn kai(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env("COLUMNS", "100")
        .env_remove("KAI_SCHEDULER_CONFIG")
        .output()
        .expect("running the binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn explain_reads_a_snapshot_file() {
    let file = snapshot_file("explain");
    let f = file.to_str().unwrap();
    let out = kai(
        env!("CARGO_BIN_EXE_kai"),
        &["--from-file", f, "explain", "pg", "training-job-pg", "-n", "ml"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("8 pods need 8 nvidia.com/gpu, 6 free on 3 nodes"),
        "{stdout}"
    );
    assert!(stdout.lines().all(|l| l.chars().count() <= 100), "{stdout}");

    let out = kai(
        env!("CARGO_BIN_EXE_kai"),
        &[
            "explain",
            "podgroup",
            "training-job-pg",
            "-n",
            "ml",
            "--from-file",
            f,
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["analysis"]["toFit"]["kind"], "add-capacity");

    let out = kai(
        env!("CARGO_BIN_EXE_kai"),
        &["--from-file", f, "explain", "pg", "nope", "-n", "ml"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: PodGroup ml/nope not found; PodGroups in namespace ml: training-job-pg\n"
    );
    std::fs::remove_file(file).unwrap();
}

#[test]
fn queues_and_top_print_tables_and_json() {
    let file = snapshot_file("tables");
    let f = file.to_str().unwrap();
    let out = kai(env!("CARGO_BIN_EXE_kai"), &["--from-file", f, "queues"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\nteam-a  100"),
        "{}",
        text(&out.stdout)
    );
    let out = kai(
        env!("CARGO_BIN_EXE_kai"),
        &["--from-file", f, "-o", "json", "top", "nodes"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total"]["gpusFree"], 6.0);
    std::fs::remove_file(file).unwrap();
}

#[test]
fn the_kubectl_plugin_names_itself_so() {
    let out = kai(env!("CARGO_BIN_EXE_kubectl-kai"), &["--help"]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("Usage: kubectl kai [OPTIONS] <COMMAND>"),
        "{}",
        text(&out.stdout)
    );
    let out = kai(env!("CARGO_BIN_EXE_kai"), &["--help"]);
    assert!(
        text(&out.stdout).contains("Usage: kai [OPTIONS] <COMMAND>"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_bad_file_is_a_clear_error() {
    let out = kai(
        env!("CARGO_BIN_EXE_kai"),
        &["--from-file", "/nonexistent/kai.yaml", "queues"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("error: reading /nonexistent/kai.yaml: "),
        "{}",
        text(&out.stderr)
    );
}

/// Writes `text` to a file of this test process (in Cargo's directory for tests' files, not the
/// system's temporary one) and returns its path.
fn temp_file(name: &str, text: &str) -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kai-cli-{name}-{}", std::process::id()));
    std::fs::write(&path, text).expect("writing a test file");
    path
}

/// Two 4-GPU jobs start together on two 8-GPU nodes and run long; an 8-GPU job comes a minute later.
/// Packed, the first two share a node and the third starts at once; spread, they take one node each
/// and the third waits for the first to end (99,940 s), a third of that on the mean over three jobs.
const SPREAD_OR_PACK: &str = "\
nodes:
  - {name: n, count: 2, cpu: 64, memoryGiB: 512, gpus: 8}
queues:
  - {name: q, quota: 16}
jobs:
  - {name: a, queue: q, arrival: 0, duration: 100000, pods: {gpus: 4}}
  - {name: b, queue: q, arrival: 0, duration: 100000, pods: {gpus: 4}}
  - {name: c, queue: q, arrival: 60, duration: 100, pods: {gpus: 8}}
";

fn mean_delay(out: &Output) -> f64 {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    report["summaries"][0]["delay"]["mean"]
        .as_f64()
        .expect("a mean delay")
}

#[test]
fn a_replay_starts_each_policy_from_the_scheduler_configuration_file() {
    let workload = temp_file("spread-or-pack.yaml", SPREAD_OR_PACK);
    let workload = workload.to_str().expect("a UTF-8 path");
    let replay = ["sim", "replay", workload, "--policies", "gang-fair", "-o", "json"];
    let packed = kai(env!("CARGO_BIN_EXE_kai"), &replay);
    assert_eq!(mean_delay(&packed), 0.0);

    // A whole scheduler file is accepted; the policy sets the actions (`Policy::config`).
    let spread = temp_file(
        "spread-config.yaml",
        "actions: [allocate, reclaim]\nplugins:\n  nodeplacement: {gpu: spread, cpu: spread}\n",
    );
    let spread = spread.to_str().expect("a UTF-8 path");
    let mut args = vec!["--scheduler-config", spread];
    args.extend(replay);
    let out = kai(env!("CARGO_BIN_EXE_kai"), &args);
    assert!(
        (mean_delay(&out) - 99_940.0 / 3.0).abs() < 1e-6,
        "{}",
        text(&out.stdout)
    );
    assert!(text(&out.stdout).contains(&format!("\"scheduler_config\": \"{spread}\"")));
}

#[test]
fn a_simulation_refuses_flags_that_name_a_cluster() {
    for flag in ["--context", "--from-file"] {
        let out = kai(
            env!("CARGO_BIN_EXE_kai"),
            &[flag, "x", "sim", "philly", "--trace", "/nonexistent.csv"],
        );
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "{flag} names a cluster to read, and `kai sim` reads no cluster"
            )),
            "{stderr}"
        );
    }
}

#[test]
fn a_replay_refuses_a_configuration_it_cannot_replay() {
    let usage = temp_file("usage-config.yaml", "usageDBConfig: {clientType: scheduler}\n");
    let usage = usage.to_str().expect("a UTF-8 path");
    let refusals = [
        (
            ["philly", "--trace", "/nonexistent.csv"],
            "usageDBConfig (usage-based fair share) is not replayed",
        ),
        (
            ["openb", "--traces", "/nonexistent"],
            "`kai sim openb` replays the FGD paper's setup",
        ),
    ];
    for (command, refusal) in refusals {
        let mut args = vec!["--scheduler-config", usage, "sim"];
        args.extend(command);
        let out = kai(env!("CARGO_BIN_EXE_kai"), &args);
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains(refusal), "{}", text(&out.stderr));
    }
}
