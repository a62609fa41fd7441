//! Registry credentials for pulling private images, read from the file `skopeo login`, `podman login` and
//! `docker login` write (containers-auth.json(5); Docker's `config.json` has the same `auths` map):
//!
//! ```json
//! {"auths": {"registry.example.com": {"auth": "base64 of user:password"},
//!            "registry.example.com/team": {"auth": "…"}}}
//! ```
//!
//! A key names a registry, or a registry and a repository namespace; the longest key that matches an image's
//! repository wins. Credential helpers (`credHelpers`, `credsStore`) and identity tokens are not consulted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use base64::Engine as _;

/// The credentials of one auth file, by normalized key (`registry[/namespace…]`).
#[derive(Debug, Default)]
pub struct AuthFile {
    pub path: PathBuf,
    creds: BTreeMap<String, (String, String)>,
}

/// The auth file to use when none is given: `$REGISTRY_AUTH_FILE`, then `$XDG_RUNTIME_DIR/containers/auth.json`
/// (without XDG_RUNTIME_DIR, `/run/containers/<uid>/auth.json`), `~/.config/containers/auth.json`,
/// `~/.docker/config.json` — the first that exists (`REGISTRY_AUTH_FILE` even
/// when it does not, so that a typo is reported rather than ignored).
pub fn default_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REGISTRY_AUTH_FILE").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|p| !p.is_empty()) {
        Some(run) => candidates.push(PathBuf::from(run).join("containers/auth.json")),
        // Where skopeo and podman keep it without a runtime directory (root's login in a service, say).
        None => {
            use std::os::unix::fs::MetadataExt as _;
            if let Ok(me) = std::fs::metadata("/proc/self") {
                candidates.push(PathBuf::from(format!(
                    "/run/containers/{}/auth.json",
                    me.uid()
                )));
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME").filter(|p| !p.is_empty()) {
        let home = PathBuf::from(home);
        candidates.push(home.join(".config/containers/auth.json"));
        candidates.push(home.join(".docker/config.json"));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// Docker Hub's keys in Docker's config (`https://index.docker.io/v1/`) and the name references use.
fn normalize(key: &str) -> String {
    let key = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let key = key.strip_suffix("/v1").unwrap_or(key);
    let (registry, rest) = key.split_once('/').unwrap_or((key, ""));
    let registry = match registry {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        r => r,
    };
    if rest.is_empty() {
        registry.to_owned()
    } else {
        format!("{registry}/{rest}")
    }
}

impl AuthFile {
    /// Reads `path`; errors name the file and the key at fault.
    pub fn load(path: &Path) -> Result<AuthFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading registry credentials from {}", path.display()))?;
        Self::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<AuthFile> {
        let v: serde_json::Value = serde_json::from_str(text)
            .with_context(|| format!("{}: not a JSON auth file", path.display()))?;
        let mut creds = BTreeMap::new();
        let Some(auths) = v.get("auths") else {
            return Ok(AuthFile {
                path: path.to_owned(),
                creds,
            });
        };
        let Some(auths) = auths.as_object() else {
            bail!("{}: auths: not an object", path.display());
        };
        for (key, entry) in auths {
            let Some(auth) = entry.get("auth").and_then(|a| a.as_str()) else {
                // An entry without `auth` (an identity token, or a helper's placeholder) gives nothing to use.
                continue;
            };
            let bad = |why: &str| anyhow::anyhow!("{}: auths.{key:?}.auth: {why}", path.display());
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|_| bad("not base64"))?;
            let decoded = String::from_utf8(decoded).map_err(|_| bad("not UTF-8 once decoded"))?;
            let (user, password) = decoded
                .split_once(':')
                .ok_or_else(|| bad("not user:password once decoded"))?;
            creds.insert(normalize(key), (user.to_owned(), password.to_owned()));
        }
        Ok(AuthFile {
            path: path.to_owned(),
            creds,
        })
    }

    /// The credentials for `repository` at `registry` (`docker.io`, `library/debian`): the longest matching key
    /// among `registry/namespace…` and `registry`. Returns the key too.
    pub fn lookup(&self, registry: &str, repository: &str) -> Option<(&str, &str, &str)> {
        let full = normalize(&format!("{registry}/{repository}"));
        let mut at = full.as_str();
        loop {
            if let Some((key, (user, password))) = self.creds.get_key_value(at) {
                return Some((key, user, password));
            }
            at = &at[..at.rfind('/')?];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn the_longest_matching_key_wins_and_docker_hub_has_its_aliases() {
        let text = serde_json::json!({"auths": {
            "registry.example.com": {"auth": b64("site:one")},
            "registry.example.com/team": {"auth": b64("team:two:with:colons")},
            "https://index.docker.io/v1/": {"auth": b64("hub:three")},
            "helper.example.com": {},
        }})
        .to_string();
        let f = AuthFile::parse(Path::new("auth.json"), &text).unwrap();
        assert_eq!(
            f.lookup("registry.example.com", "team/app"),
            Some(("registry.example.com/team", "team", "two:with:colons"))
        );
        assert_eq!(
            f.lookup("registry.example.com", "teamless/app"),
            Some(("registry.example.com", "site", "one"))
        );
        assert_eq!(
            f.lookup("docker.io", "library/debian"),
            Some(("docker.io", "hub", "three"))
        );
        assert_eq!(f.lookup("helper.example.com", "x"), None);
        assert_eq!(f.lookup("quay.io", "metal3-io/ironic"), None);
        assert_eq!(f.lookup("registry.example.co", "m/team"), None);
    }

    #[test]
    fn bad_entries_name_the_file_and_key() {
        let bad = |auth: &str| {
            let text = serde_json::json!({"auths": {"r.example": {"auth": auth}}}).to_string();
            format!(
                "{:#}",
                AuthFile::parse(Path::new("/x/auth.json"), &text).unwrap_err()
            )
        };
        assert!(bad("***").contains("/x/auth.json: auths.\"r.example\".auth: not base64"));
        assert!(bad(&b64("nocolon")).contains("not user:password"));
        let e = AuthFile::parse(Path::new("/x/auth.json"), "{").unwrap_err();
        assert!(format!("{e:#}").contains("/x/auth.json: not a JSON auth file"));
        // A file with no auths (Docker's config with only a credsStore) has no credentials.
        let f = AuthFile::parse(Path::new("c.json"), r#"{"credsStore":"desktop"}"#).unwrap();
        assert_eq!(f.lookup("docker.io", "library/debian"), None);
    }
}
