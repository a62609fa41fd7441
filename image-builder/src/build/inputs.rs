//! The build's inputs, found and checked before anything is made: every file input (the spec's path, or the
//! cache for a URL or a source build) against its pin, the agent binary, and the spec's own overlay.

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};

use super::context::Settings;
use crate::spec::Loaded;

/// The agent binary to install: `--agent`, else the spec's `components.agent.path`; it must be a file.
pub fn agent_path(loaded: &Loaded, settings: &Settings) -> Result<PathBuf> {
    let agent = settings
        .agent
        .clone()
        .or_else(|| {
            loaded
                .spec
                .components
                .agent
                .as_ref()
                .map(|a| loaded.resolve(&a.path))
        })
        .context("no agent binary: set components.agent.path in the spec or pass --agent")?;
    if !agent.is_file() {
        bail!(
            "{}: components.agent.path: {} is not a file (build it with cargo build --release -p foothold-agent)",
            loaded.path.display(),
            agent.display()
        );
    }
    Ok(agent)
}

/// The spec's `components.overlay`, laid over Foothold's own files (see [`crate::overlay`]); it must be a
/// directory.
pub fn spec_overlay(loaded: &Loaded) -> Result<Option<PathBuf>> {
    let Some(o) = &loaded.spec.components.overlay else {
        return Ok(None);
    };
    let dir = loaded.resolve(o);
    if !dir.is_dir() {
        bail!(
            "{}: components.overlay: {} is not a directory",
            loaded.path.display(),
            dir.display()
        );
    }
    Ok(Some(dir))
}

/// One of the spec's file inputs, found and checked against its pin.
pub struct FileInput {
    pub field: String,
    pub component: crate::spec::FileComponent,
    pub src: PathBuf,
    /// Where it came from: the spec's path or URL.
    pub origin: String,
    pub sha256: String,
}

/// Every file input of the spec with its source (the spec's path, or the cache for a URL) and its sha256,
/// which must match the pin where there is one.
pub fn resolve(loaded: &Loaded, settings: &Settings) -> Result<Vec<FileInput>> {
    let mut out = Vec::new();
    for (field, f) in loaded.spec.sources() {
        let (src, origin) = match (&f.path, &f.url) {
            (Some(p), _) => (loaded.resolve(p), p.display().to_string()),
            (None, url) => {
                let hex = f
                    .sha256
                    .as_deref()
                    .expect("validated: remote and built inputs are pinned");
                let cached = crate::fetch::cached(&settings.cache, hex);
                let what = url
                    .clone()
                    .or_else(|| f.source_ref().map(|(_, r)| r.to_owned()))
                    .unwrap_or_default();
                if !cached.is_file() {
                    bail!(
                        "{}: {field}: {what} is not in the cache; run `foothold-build fetch` first",
                        loaded.path.display()
                    );
                }
                let origin = match crate::fetch::provenance(&settings.cache, hex) {
                    Some(p) if url.is_none() => p,
                    _ => what,
                };
                (cached, origin)
            }
        };
        let digest =
            crate::sparse::sha256(&src).with_context(|| format!("{field}: {}", src.display()))?;
        if let Some(want) = &f.sha256 {
            if *want != digest {
                bail!(
                    "{}: {field}: {} has sha256 {digest}, the spec pins {want}",
                    loaded.path.display(),
                    src.display()
                );
            }
        }
        out.push(FileInput {
            field,
            component: f,
            src,
            origin,
            sha256: digest,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(dir: &std::path::Path, extra: &str) -> Loaded {
        let yaml = format!(
            "name: lab\nbase:\n  suite: trixie\nhostname: lab\noutputs:\n  formats: [raw]\n  diskSize: 4GiB\n{extra}"
        );
        crate::spec::load_text(&dir.join("lab.yaml"), &yaml, crate::spec::Pins::Required).unwrap()
    }

    /// A spec's overlay that is not there used to be skipped in silence, and the image built without it.
    #[test]
    fn a_spec_overlay_that_is_missing_fails_naming_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let l = loaded(dir.path(), "components:\n  overlay: site-files\n");
        let e = format!("{:#}", spec_overlay(&l).unwrap_err());
        assert!(e.contains("lab.yaml: components.overlay: "), "{e}");
        assert!(e.ends_with("site-files is not a directory"), "{e}");
        std::fs::create_dir(dir.path().join("site-files")).unwrap();
        assert_eq!(
            spec_overlay(&l).unwrap(),
            Some(dir.path().join("site-files"))
        );
        assert_eq!(spec_overlay(&loaded(dir.path(), "")).unwrap(), None);
    }
}
