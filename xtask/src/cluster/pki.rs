//! Certificates, keys, the admin token and the kubeconfig of the local control plane (made with openssl,
//! once; kept across `down`/`up` so kubeconfigs stay valid).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

use super::run;

/// Paths of the material in `<cluster>/pki` and the token file.
#[derive(Debug, Clone)]
pub(crate) struct Pki {
    pub(crate) ca_cert: PathBuf,
    pub(crate) ca_key: PathBuf,
    pub(crate) serving_cert: PathBuf,
    pub(crate) serving_key: PathBuf,
    pub(crate) sa_key: PathBuf,
    pub(crate) sa_pub: PathBuf,
    pub(crate) token_file: PathBuf,
}

impl Pki {
    pub(crate) fn at(cluster_dir: &Path) -> Self {
        let pki = cluster_dir.join("pki");
        Self {
            ca_cert: pki.join("ca.crt"),
            ca_key: pki.join("ca.key"),
            serving_cert: pki.join("serving.crt"),
            serving_key: pki.join("serving.key"),
            sa_key: pki.join("service-account.key"),
            sa_pub: pki.join("service-account.pub"),
            token_file: cluster_dir.join("tokens.csv"),
        }
    }

    fn all(&self) -> [&Path; 7] {
        [
            &self.ca_cert,
            &self.ca_key,
            &self.serving_cert,
            &self.serving_key,
            &self.sa_key,
            &self.sa_pub,
            &self.token_file,
        ]
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.all().iter().all(|p| p.is_file())
    }

    /// Creates whatever is missing (everything, when anything is: the pieces depend on each other).
    pub(crate) fn ensure(&self) -> anyhow::Result<()> {
        if self.is_complete() {
            println!("    present");
            return Ok(());
        }
        let dir = self.ca_cert.parent().context("pki dir")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let openssl = |args: &[&str], what: &str| {
            run(
                Command::new("openssl")
                    .args(args)
                    .current_dir(dir)
                    .stdin(Stdio::null()),
                what,
            )
        };
        let s = |p: &Path| p.to_string_lossy().into_owned();
        openssl(
            &["genrsa", "-out", &s(&self.ca_key), "2048"],
            "openssl genrsa (CA)",
        )?;
        openssl(
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                &s(&self.ca_key),
                "-sha256",
                "-days",
                "3650",
                "-subj",
                "/CN=kai-dev-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-out",
                &s(&self.ca_cert),
            ],
            "openssl req (CA)",
        )?;
        openssl(
            &["genrsa", "-out", &s(&self.serving_key), "2048"],
            "openssl genrsa (serving)",
        )?;
        let csr = dir.join("serving.csr");
        openssl(
            &[
                "req",
                "-new",
                "-key",
                &s(&self.serving_key),
                "-subj",
                "/CN=kube-apiserver",
                "-out",
                &s(&csr),
            ],
            "openssl req (serving)",
        )?;
        let extensions = dir.join("serving.ext");
        std::fs::write(
            &extensions,
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n\
             subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,\
             DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.0.0.1\n",
        )?;
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &s(&csr),
                "-CA",
                &s(&self.ca_cert),
                "-CAkey",
                &s(&self.ca_key),
                "-CAcreateserial",
                "-sha256",
                "-days",
                "3650",
                "-extfile",
                &s(&extensions),
                "-out",
                &s(&self.serving_cert),
            ],
            "openssl x509 (serving)",
        )?;
        openssl(
            &["genrsa", "-out", &s(&self.sa_key), "2048"],
            "openssl genrsa (service accounts)",
        )?;
        openssl(
            &[
                "rsa",
                "-in",
                &s(&self.sa_key),
                "-pubout",
                "-out",
                &s(&self.sa_pub),
            ],
            "openssl rsa -pubout",
        )?;
        let token = random_token()?;
        write_private(
            &self.token_file,
            &format!("{token},kai-dev-admin,kai-dev-admin,\"system:masters\"\n"),
        )?;
        Ok(())
    }

    /// The admin token from the token file.
    pub(crate) fn admin_token(&self) -> anyhow::Result<String> {
        let text = std::fs::read_to_string(&self.token_file)
            .with_context(|| format!("reading {}", self.token_file.display()))?;
        text.split(',')
            .next()
            .filter(|t| !t.trim().is_empty())
            .map(|t| t.trim().to_owned())
            .context("empty token file")
    }
}

/// 32 hex characters from the kernel's random source.
fn random_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes a file readable only by its owner, atomically (write then rename).
pub(crate) fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let temporary = path.with_extension("tmp");
    {
        use std::io::Write as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .with_context(|| format!("writing {}", temporary.display()))?;
        file.write_all(content.as_bytes())?;
    }
    std::fs::rename(&temporary, path).with_context(|| format!("writing {}", path.display()))
}

/// A kubeconfig with the CA embedded (so the file can be copied elsewhere) and a bearer token.
pub(crate) fn kubeconfig(server: &str, ca_pem: &str, token: &str) -> anyhow::Result<String> {
    if token.contains(char::is_whitespace) {
        bail!("invalid token");
    }
    let ca_data = base64(ca_pem.as_bytes());
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kai-dev\n  cluster:\n    server: {server}\n    \
         certificate-authority-data: {ca_data}\nusers:\n- name: kai-dev-admin\n  user:\n    token: {token}\n\
         contexts:\n- name: kai-dev\n  context:\n    cluster: kai-dev\n    user: kai-dev-admin\n\
         current-context: kai-dev\n"
    ))
}

/// Standard base64 with padding (a few lines instead of a dependency).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn kubeconfig_parses_as_one() {
        let text =
            kubeconfig("https://127.0.0.1:16443", "-----BEGIN CERTIFICATE-----\n", "abc").expect("render");
        let parsed = kube::config::Kubeconfig::from_yaml(&text).expect("valid kubeconfig");
        assert_eq!(parsed.current_context.as_deref(), Some("kai-dev"));
        assert_eq!(
            parsed.clusters[0]
                .cluster
                .as_ref()
                .and_then(|c| c.server.as_deref()),
            Some("https://127.0.0.1:16443")
        );
    }
}
