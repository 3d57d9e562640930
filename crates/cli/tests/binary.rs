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
    let path = std::env::temp_dir().join(format!("kai-cli-{test}-{}.yaml", std::process::id()));
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
