//! `kai-gpu-reservation`: the program of a GPU reservation pod. The device plugin gives the container one
//! whole GPU and names it in `NVIDIA_VISIBLE_DEVICES`; this reports that device on the pod
//! (`run.ai/reserve_for_gpu_index`) so the scheduler can point the pods sharing it at the same device,
//! then holds the GPU until the pod is deleted.

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let name = std::env::var("POD_NAME").context("POD_NAME is not set (downward API)")?;
    let namespace = std::env::var("POD_NAMESPACE").context("POD_NAMESPACE is not set (downward API)")?;
    let devices = std::env::var("NVIDIA_VISIBLE_DEVICES").unwrap_or_default();
    let device = devices
        .split(',')
        .map(str::trim)
        .find(|d| !d.is_empty() && *d != "all" && *d != "none" && *d != "void")
        .context("NVIDIA_VISIBLE_DEVICES names no device; is the NVIDIA device plugin running?")?
        .to_owned();
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let patch = json!({ "metadata": { "annotations": { api::keys::RESERVED_GPU_INDEX: device } } });
    pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("annotating the reservation pod")?;
    eprintln!("holding GPU {device} for pod {namespace}/{name}");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
