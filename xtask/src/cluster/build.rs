//! Building kube-apiserver, kube-controller-manager, kube-scheduler and kubectl v1.20.2 from Debian's
//! source package, and caching them by version.
//!
//! Recipe (each fact matters on Go 1.19): GOPATH mode (module mode with `-mod=vendor` fails), the vendored
//! reflect2 1.0.1 replaced by Debian's 1.0.2 (1.0.1 crashes under Go >= 1.18), the OpenAPI definitions
//! generated with the vendored openapi-gen (they are not shipped), and version ldflags so the server
//! reports v1.20.2 rather than v0.0.0-master.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use e2e::DevPaths;

use super::{apt, run_logged};

/// The binaries built and cached.
pub(crate) const BINARIES: [&str; 4] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
];

/// Changes whenever the recipe changes, so cached binaries built another way are rebuilt.
const RECIPE: &str =
    "kubernetes=1.20.5+really1.20.2-1.1+deb12u1 reflect2=debian openapi=vendored ldflags=v1.20.2 cgo=0 strip";

const STAMP: &str = ".build-recipe";

const REFLECT2: &str = "/usr/share/gocode/src/github.com/modern-go/reflect2";

/// Whether every binary is cached and was built with this recipe.
pub(crate) fn is_cached(paths: &DevPaths) -> bool {
    let bin = paths.k8s_bin_dir();
    BINARIES.iter().all(|b| bin.join(b).is_file())
        && std::fs::read_to_string(bin.join(STAMP)).is_ok_and(|s| s.trim() == RECIPE)
}

/// Builds all binaries from the `.dsc` into the cache. The work area is removed on success.
pub(crate) fn build(paths: &DevPaths, dsc: &Path) -> anyhow::Result<()> {
    let work = paths.k8s_dir().join("build");
    let log = paths.k8s_dir().join("build.log");
    let tree = work.join("src");
    let gopath = work.join("gopath");
    let out = work.join("out");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let _ = std::fs::remove_file(&log);
    println!("    build log: {}", log.display());

    if !tree.join(".kai-prepared").exists() {
        let _ = std::fs::remove_dir_all(&tree);
        println!("    unpacking {}", dsc.display());
        run_logged(
            Command::new("dpkg-source").arg("-x").arg(dsc).arg(&tree),
            &log,
            "dpkg-source -x",
        )?;
        let vendored = tree.join("vendor/github.com/modern-go/reflect2");
        if !Path::new(REFLECT2).is_dir() {
            bail!("{REFLECT2} is missing (package golang-github-modern-go-reflect2-dev)");
        }
        println!("    replacing vendored reflect2 1.0.1 with Debian's 1.0.2");
        std::fs::remove_dir_all(&vendored).with_context(|| format!("removing {}", vendored.display()))?;
        copy_dir(Path::new(REFLECT2), &vendored)?;
        std::fs::write(tree.join(".kai-prepared"), RECIPE)?;
    }
    let link = gopath.join("src/k8s.io/kubernetes");
    std::fs::create_dir_all(link.parent().context("GOPATH layout")?)?;
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&tree, &link).with_context(|| format!("linking {}", link.display()))?;

    let go = |args: &[&str]| -> Command {
        let mut c = Command::new("go");
        // Go derives the import path from $PWD: it must be the GOPATH path, not the resolved one.
        c.args(args)
            .current_dir(&link)
            .env("PWD", &link)
            .env("GOPATH", &gopath)
            .env("GO111MODULE", "off")
            .env("CGO_ENABLED", "0")
            .env("GOCACHE", work.join("gocache"))
            .env("GOFLAGS", "")
            .env("GOPROXY", "off")
            .stdin(Stdio::null());
        c
    };

    let generated = tree.join("pkg/generated/openapi/zz_generated.openapi.go");
    if !generated.exists() {
        println!("    building openapi-gen");
        let openapi_gen = out.join("openapi-gen");
        run_logged(
            go(&["build", "-o"])
                .arg(&openapi_gen)
                .arg("./vendor/k8s.io/kube-openapi/cmd/openapi-gen"),
            &log,
            "go build openapi-gen",
        )?;
        let dirs = openapi_dirs(&tree)?;
        println!("    generating OpenAPI definitions for {} packages", dirs.len());
        let inputs: Vec<String> = dirs.iter().map(|d| format!("k8s.io/kubernetes/{d}")).collect();
        let mut generate = Command::new(&openapi_gen);
        generate
            .arg("--input-dirs")
            .arg(inputs.join(","))
            .args([
                "--output-package",
                "k8s.io/kubernetes/pkg/generated/openapi",
                "-O",
                "zz_generated.openapi",
            ])
            .arg("--go-header-file")
            .arg(tree.join("vendor/k8s.io/code-generator/hack/boilerplate.go.txt"))
            .arg("--output-base")
            .arg(gopath.join("src"))
            .arg("--report-filename")
            .arg(work.join("openapi-violations.txt"))
            .current_dir(&link)
            .env("PWD", &link)
            .env("GOPATH", &gopath)
            .env("GO111MODULE", "off")
            .stdin(Stdio::null());
        run_logged(&mut generate, &log, "openapi-gen")?;
        if !generated.exists() {
            bail!("openapi-gen did not write {}", generated.display());
        }
    }

    let ldflags = version_ldflags();
    for binary in BINARIES {
        let target = out.join(binary);
        if target.exists() {
            continue;
        }
        let started = std::time::Instant::now();
        run_logged(
            go(&["build", "-ldflags", &ldflags, "-o"])
                .arg(&target)
                .arg(format!("k8s.io/kubernetes/cmd/{binary}")),
            &log,
            &format!("go build {binary}"),
        )?;
        println!("    built {binary} in {:.0?}", started.elapsed());
    }

    let bin = paths.k8s_bin_dir();
    std::fs::create_dir_all(&bin)?;
    for binary in BINARIES {
        std::fs::rename(out.join(binary), bin.join(binary)).with_context(|| format!("caching {binary}"))?;
    }
    std::fs::write(bin.join(STAMP), RECIPE)?;
    std::fs::remove_dir_all(&work).with_context(|| format!("removing the work area {}", work.display()))?;
    Ok(())
}

/// `-X` flags so binaries report v1.20.2; `-s -w` drop symbol tables (a third of the size).
fn version_ldflags() -> String {
    let mut flags = vec!["-s".to_owned(), "-w".to_owned()];
    for package in ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"] {
        for (key, value) in [
            ("gitVersion", "v1.20.2"),
            ("gitMajor", "1"),
            ("gitMinor", "20"),
            ("gitTreeState", "clean"),
        ] {
            flags.push(format!("-X k8s.io/kubernetes/vendor/{package}.{key}={value}"));
        }
    }
    flags.join(" ")
}

/// Directories (relative to `tree`) whose non-test Go files carry a `+k8s:openapi-gen=` tag, under `pkg`,
/// `vendor/k8s.io` (symlinks into `staging/`), `cmd` and `plugin`, except the code generator and the
/// sample API server.
pub(crate) fn openapi_dirs(tree: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for root in ["pkg", "vendor/k8s.io", "cmd", "plugin"] {
        walk(tree, Path::new(root), &mut seen, &mut found)?;
    }
    Ok(found
        .into_iter()
        .filter(|d: &String| {
            !d.starts_with("vendor/k8s.io/code-generator") && !d.starts_with("vendor/k8s.io/sample-apiserver")
        })
        .collect())
}

/// The tag marking packages whose types get OpenAPI definitions.
const OPENAPI_TAG: &[u8] = b"+k8s:openapi-gen=";

fn walk(
    tree: &Path,
    relative: &Path,
    seen: &mut BTreeSet<PathBuf>,
    found: &mut BTreeSet<String>,
) -> anyhow::Result<()> {
    let absolute = tree.join(relative);
    // Follow symlinks, but never visit a directory twice.
    let Ok(canonical) = absolute.canonicalize() else {
        return Ok(());
    };
    if !seen.insert(canonical) {
        return Ok(());
    }
    let Ok(entries) = std::fs::read_dir(&absolute) else {
        return Ok(());
    };
    let mut tagged = false;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        if path.is_dir() {
            walk(tree, &relative.join(&*name), seen, found)?;
        } else if !tagged
            && name.ends_with(".go")
            && !name.ends_with("_test.go")
            && std::fs::read(&path).is_ok_and(|b| b.windows(OPENAPI_TAG.len()).any(|w| w == OPENAPI_TAG))
        {
            tagged = true;
        }
    }
    if tagged {
        found.insert(relative.to_string_lossy().into_owned());
    }
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying to {}", target.display()))?;
        }
    }
    Ok(())
}

/// The apt packages the build needs.
pub(crate) const BUILD_PACKAGES: [&str; 3] =
    ["golang-go", "golang-github-modern-go-reflect2-dev", "dpkg-dev"];

/// Source download into the version's cache directory.
pub(crate) fn ensure_source(apt: &mut apt::Apt, paths: &DevPaths) -> anyhow::Result<PathBuf> {
    apt.ensure_source(&paths.k8s_dir().join("source"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_tagged_packages_through_symlinks_and_skips_excluded_ones() {
        let tree = std::env::temp_dir().join(format!("xtask-openapi-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tree);
        let write = |path: &str, content: &str| {
            let path = tree.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, content).expect("write");
        };
        write(
            "pkg/apis/core/v1/doc.go",
            "// +k8s:openapi-gen=true\npackage v1\n",
        );
        write("pkg/apis/core/v1/types_test.go", "// +k8s:openapi-gen=true\n");
        write("pkg/util/x.go", "package util\n");
        write("pkg/only_test/a_test.go", "// +k8s:openapi-gen=true\n");
        write(
            "staging/src/k8s.io/api/apps/v1/doc.go",
            "// +k8s:openapi-gen=true\n",
        );
        write(
            "staging/src/k8s.io/code-generator/x/doc.go",
            "// +k8s:openapi-gen=true\n",
        );
        std::fs::create_dir_all(tree.join("vendor/k8s.io")).expect("mkdir");
        for name in ["api", "code-generator"] {
            std::os::unix::fs::symlink(
                format!("../../staging/src/k8s.io/{name}"),
                tree.join("vendor/k8s.io").join(name),
            )
            .expect("symlink");
        }
        let dirs = openapi_dirs(&tree).expect("walk");
        assert_eq!(dirs, ["pkg/apis/core/v1", "vendor/k8s.io/api/apps/v1"]);
        std::fs::remove_dir_all(&tree).expect("cleanup");
    }

    #[test]
    fn ldflags_set_both_version_packages() {
        let flags = version_ldflags();
        assert!(
            flags.contains("-X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitVersion=v1.20.2")
        );
        assert!(flags.contains("-X k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version.gitMinor=20"));
    }
}
