//! SIGTERM cancels the shutdown token. A separate test binary, so the signal cannot reach other tests;
//! once `on_signals` has installed its handlers, the signal no longer terminates the process.

use std::time::Duration;

#[tokio::test]
async fn sigterm_cancels_the_shutdown_token() {
    let token = kai_runtime::shutdown::on_signals().expect("handlers installed");
    let child = token.child_token();
    assert!(!token.is_cancelled());

    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());

    tokio::time::timeout(Duration::from_secs(30), token.cancelled())
        .await
        .expect("token cancelled by SIGTERM");
    assert!(child.is_cancelled(), "child tokens follow");
}
