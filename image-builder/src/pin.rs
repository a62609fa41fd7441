//! `foothold-build pin`: fills in what a spec leaves unpinned and writes it into the spec file in place. A `url`
//! input gets the sha256 of its content (downloaded whole, and kept in the cache so that the fetch that follows
//! makes no request); an image gets the digest its tag resolves to at its registry. With `update`, every url and
//! tag is resolved again and the pins that moved are rewritten.
//!
//! Only the values change: comments, order, quoting and layout stay as they were. The spec is edited at the
//! source positions the YAML parser reports; the result must read back as the old spec with the new pins, or
//! nothing is written. The file is replaced atomically.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use granit_parser::{Event, Marker, Parser, StructureStyle};

use crate::images::PullSettings;
use crate::progress::Progress;
use crate::spec::{self, Pins, Spec};

/// One pin set (or changed) in the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The spec field of the input (`components.kubernetes.kubelet`, `components.images[0]`).
    pub field: String,
    /// `sha256` or `digest`.
    pub key: &'static str,
    pub old: Option<String>,
    pub new: String,
}

/// Pins the spec at `path` (see the module). Returns what changed; nothing changed leaves the file untouched.
pub fn pin(
    path: &Path,
    cache: &Path,
    update: bool,
    settings: &PullSettings,
    progress: &Progress,
) -> Result<Vec<Change>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // The text that is edited is the text that was validated.
    let loaded = spec::load_text(path, &text, Pins::Optional)?;
    let file = path.display();
    let mut changes = Vec::new();
    for (field, f) in loaded.spec.sources() {
        if f.path.is_some() || (f.sha256.is_some() && !update) {
            continue;
        }
        let hex = if let Some(url) = &f.url {
            progress.step("pin", &format!("downloading {url} ({field})"));
            crate::fetch::fetch_unpinned(cache, url, Some(progress))
                .with_context(|| format!("{file}: {field}.url"))?
        } else {
            let recipe = f
                .recipe()
                .expect("validated: url, path, go or cc")
                .located(&loaded.dir, |h| crate::fetch::cached(cache, h));
            let (key, what) = f.source_ref().expect("a recipe has a source");
            progress.step("pin", &format!("building {what} ({field})"));
            crate::fetch::build_source(cache, &recipe, None)
                .with_context(|| format!("{file}: {field}.{key}"))?
                .0
        };
        changes.push(Change {
            field,
            key: "sha256",
            old: f.sha256,
            new: hex,
        });
    }
    let images: Vec<(String, &spec::ImageComponent)> = loaded
        .spec
        .components
        .images
        .iter()
        .enumerate()
        .filter(|(_, im)| im.digest.is_none() || update)
        .map(|(i, im)| (format!("components.images[{i}]"), im))
        .collect();
    let digests = crate::images::resolve_all(&images, cache, settings, progress)
        .with_context(|| file.to_string())?;
    for ((field, im), digest) in images.into_iter().zip(digests) {
        changes.push(Change {
            field,
            key: "digest",
            old: im.digest.clone(),
            new: digest,
        });
    }
    changes.retain(|c| c.old.as_deref() != Some(c.new.as_str()));
    if changes.is_empty() {
        return Ok(changes);
    }

    let edited = edit(&text, &changes).with_context(|| format!("{file}: writing the pins"))?;
    // The edit must read back as the same spec with the new pins, complete.
    let mut want = loaded.spec.clone();
    for c in &changes {
        set_pin(&mut want, c)?;
    }
    let got = spec::parse(&edited).map_err(|e| {
        anyhow::anyhow!("{file}: the pinned spec does not read back ({e}); nothing was written")
    })?;
    if got != want {
        bail!("{file}: the pinned spec reads back differently from the spec with its pins; nothing was written");
    }
    got.validate()
        .map_err(|e| anyhow::anyhow!("{file}: after pinning: {e}"))?;
    write_in_place(path, edited.as_bytes())?;
    for c in &changes {
        progress.step(
            "pin",
            &match &c.old {
                None => format!("{}.{}: {}", c.field, c.key, c.new),
                Some(old) => format!("{}.{}: {} (was {old})", c.field, c.key, c.new),
            },
        );
    }
    Ok(changes)
}

/// Sets a change's pin in the parsed spec, as the edited text should read.
fn set_pin(spec: &mut Spec, c: &Change) -> Result<()> {
    let c_ = &mut spec.components;
    let index = |prefix: &str| -> Option<usize> {
        c.field
            .strip_prefix(prefix)?
            .strip_suffix(']')?
            .parse()
            .ok()
    };
    let slot = if let Some(i) = index("components.images[") {
        c_.images.get_mut(i).map(|im| &mut im.digest)
    } else if let Some(i) = index("components.files[") {
        c_.files.get_mut(i).map(|f| &mut f.sha256)
    } else if let Some(i) = index("components.manifests[") {
        c_.manifests.get_mut(i).map(|f| &mut f.sha256)
    } else if let Some(name) = c.field.strip_prefix("components.kubernetes.") {
        c_.kubernetes.as_mut().and_then(|k| {
            let i = match name {
                "kubelet" => &mut k.kubelet,
                "kubeApiserver" => &mut k.kube_apiserver,
                "kubeControllerManager" => &mut k.kube_controller_manager,
                "kubeScheduler" => &mut k.kube_scheduler,
                "kubeProxy" => &mut k.kube_proxy,
                "kubectl" => &mut k.kubectl,
                "kubeadm" => &mut k.kubeadm,
                "pause.binary" => &mut k.pause.binary,
                "coredns.binary" => &mut k.coredns.binary,
                "etcd.binary" => &mut k.etcd.as_mut()?.binary,
                _ => return None,
            };
            Some(&mut i.sha256)
        })
    } else if let Some(name) = c.field.strip_prefix("components.metal3.baremetalOperator.") {
        c_.metal3.as_mut().and_then(|m| {
            let b = &mut m.baremetal_operator;
            match name {
                "manager" => Some(&mut b.manager.sha256),
                "plugin" => Some(&mut b.plugin.sha256),
                _ => None,
            }
        })
    } else {
        None
    };
    *slot.with_context(|| format!("no pinnable input at {}", c.field))? = Some(c.new.clone());
    Ok(())
}

/// A mapping in the YAML source.
#[derive(Debug, Default)]
struct Mapping {
    flow: bool,
    /// For a flow mapping, the byte just after its `{`.
    open: Option<usize>,
    /// By key: the key's start and the value's byte range (None for an alias or a collection).
    entries: BTreeMap<String, (Marker, Option<(usize, usize)>)>,
}

/// Every mapping of the document by its path (`components.kubernetes.kubelet`, `components.files[0]`; the root is "").
fn mappings(text: &str) -> Result<BTreeMap<String, Mapping>> {
    enum Frame {
        Map {
            path: String,
            key: Option<(String, Marker)>,
        },
        Seq {
            path: String,
            next: usize,
        },
    }
    let byte = |m: Marker| {
        m.byte_offset().unwrap_or_else(|| {
            text.char_indices()
                .nth(m.index())
                .map_or(text.len(), |(b, _)| b)
        })
    };
    let mut out: BTreeMap<String, Mapping> = BTreeMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    // The path of the node that starts now; None when it is a mapping key.
    fn place(stack: &mut [Frame]) -> Option<String> {
        match stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Seq { path, next }) => {
                *next += 1;
                Some(format!("{path}[{}]", *next - 1))
            }
            Some(Frame::Map { key: None, .. }) => None,
            Some(Frame::Map {
                path,
                key: Some((k, _)),
            }) => Some(if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            }),
        }
    }
    for ev in Parser::new_from_str(text) {
        let (ev, span) = ev.map_err(|e| anyhow::anyhow!("{e}"))?;
        match ev {
            Event::MappingStart(style, ..) | Event::SequenceStart(style, ..) => {
                let Some(path) = place(&mut stack) else {
                    bail!("line {}: a collection as a mapping key", span.start.line());
                };
                if let Some(Frame::Map {
                    path: parent,
                    key: Some((k, at)),
                }) = stack.last()
                {
                    if let Some(m) = out.get_mut(parent) {
                        m.entries.insert(k.clone(), (*at, None));
                    }
                }
                if matches!(ev, Event::MappingStart(..)) {
                    out.insert(
                        path.clone(),
                        Mapping {
                            flow: style == StructureStyle::Flow,
                            open: (style == StructureStyle::Flow).then(|| byte(span.start) + 1),
                            entries: BTreeMap::new(),
                        },
                    );
                    stack.push(Frame::Map { path, key: None });
                } else {
                    stack.push(Frame::Seq { path, next: 0 });
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
                if let Some(Frame::Map { key, .. }) = stack.last_mut() {
                    *key = None;
                }
            }
            Event::Scalar(..) | Event::Alias(..) => {
                let is_key = place(&mut stack).is_none();
                let value = match ev {
                    Event::Scalar(v, ..) => Some(v.into_owned()),
                    _ => None,
                };
                match stack.last_mut() {
                    Some(Frame::Map {
                        key: key @ None, ..
                    }) if is_key => {
                        let k = value.with_context(|| {
                            format!("line {}: an alias as a mapping key", span.start.line())
                        })?;
                        *key = Some((k, span.start));
                    }
                    Some(Frame::Map { path, key }) => {
                        let (k, at) = key.take().expect("a value follows its key");
                        let range = value.map(|_| (byte(span.start), byte(span.end)));
                        if let Some(m) = out.get_mut(path.as_str()) {
                            m.entries.insert(k, (at, range));
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Writes the changes' pins into the spec text: an existing value is replaced, a missing one goes after the
/// input's `url` (or the image's `reference`), in the mapping's own style and indentation, or into an empty
/// flow mapping (`manager: {}`).
pub fn edit(text: &str, changes: &[Change]) -> Result<String> {
    let maps = mappings(text)?;
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for c in changes {
        let m = maps
            .get(&c.field)
            .with_context(|| format!("{} is not a mapping in the file", c.field))?;
        // The pin goes after what it pins: an image's reference, an input's url or source.
        let anchor = if c.key == "digest" {
            "reference"
        } else {
            ["url", "go", "cc"]
                .into_iter()
                .find(|k| m.entries.contains_key(*k))
                .unwrap_or("url")
        };
        let hint = || format!("; set {}.{}: {} by hand", c.field, c.key, c.new);
        if let Some((_, range)) = m.entries.get(c.key) {
            let (start, end) = range
                .with_context(|| format!("{}.{} is not a plain value{}", c.field, c.key, hint()))?;
            edits.push((start, end, c.new.clone()));
            continue;
        }
        let Some((key_at, range)) = m.entries.get(anchor) else {
            // A flow mapping with nothing to follow (`manager: {}`, a pin of something built): first in it.
            let open = m
                .open
                .filter(|_| m.entries.is_empty())
                .with_context(|| format!("{} has no {anchor}{}", c.field, hint()))?;
            edits.push((open, open, format!("{}: {}", c.key, c.new)));
            continue;
        };
        let (_, end) = range
            .with_context(|| format!("{}.{anchor} is not a plain value{}", c.field, hint()))?;
        if m.flow {
            edits.push((end, end, format!(", {}: {}", c.key, c.new)));
        } else {
            // After the anchor's line (and any comment on it), at the anchor key's column.
            let eol = text[end..].find('\n').map_or(text.len(), |i| end + i);
            let (eol, newline) = match text[..eol].strip_suffix('\r') {
                Some(_) => (eol - 1, "\r\n"),
                None => (eol, "\n"),
            };
            edits.push((
                eol,
                eol,
                format!("{newline}{}{}: {}", " ".repeat(key_at.col()), c.key, c.new),
            ));
        }
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut out = text.to_owned();
    for (start, end, with) in edits {
        out.replace_range(start..end, &with);
    }
    Ok(out)
}

/// Replaces the file with `bytes` atomically, keeping its permissions.
pub fn write_in_place(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let perms = std::fs::metadata(path)?.permissions();
    let mut tmp = tempfile::Builder::new()
        .prefix(".foothold-pin-")
        .tempfile_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    tmp.write_all(bytes)?;
    tmp.as_file().set_permissions(perms)?;
    let tmp = tmp.into_temp_path();
    crate::files::publish(&tmp, path)?;
    tmp.keep()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(field: &str, key: &'static str, new: &str) -> Change {
        Change {
            field: field.into(),
            key,
            old: None,
            new: new.into(),
        }
    }

    const SPEC: &str = "\
# The lab — with a comment that is not ASCII.
name: t
components:
  kubernetes:
    kubelet: {go: 'k8s.io/kubernetes/cmd/kubelet@v1.35.4'}   # flow
    pause:
      binary:
        cc: k8s.io/kubernetes/build/pause/linux/pause.c@v1.35.4 # block
        # a comment between
  manifests:
      - url: https://h/images.tar.zst # block, in a sequence
  files:
    - url: \"https://h/f\"
      sha256: 0000
      dest: /f
  images:
    - reference: quay.io/a/b:1
      platforms: [linux/amd64]
";

    #[test]
    fn pins_go_after_their_anchor_in_the_mappings_style() {
        let out = edit(
            SPEC,
            &[
                change("components.kubernetes.kubelet", "sha256", "aa"),
                change("components.manifests[0]", "sha256", "bb"),
                change("components.kubernetes.pause.binary", "sha256", "ee"),
                change("components.files[0]", "sha256", "cc"),
                change("components.images[0]", "digest", "sha256:dd"),
            ],
        )
        .unwrap();
        let want = SPEC
            .replace(
                "{go: 'k8s.io/kubernetes/cmd/kubelet@v1.35.4'}",
                "{go: 'k8s.io/kubernetes/cmd/kubelet@v1.35.4', sha256: aa}",
            )
            .replace("# block\n", "# block\n        sha256: ee\n")
            .replace(
                "# block, in a sequence\n",
                "# block, in a sequence\n        sha256: bb\n",
            )
            .replace("sha256: 0000", "sha256: cc")
            .replace(
                "quay.io/a/b:1\n",
                "quay.io/a/b:1\n      digest: sha256:dd\n",
            );
        assert_eq!(out, want);
    }

    #[test]
    fn a_pin_of_something_built_goes_first_in_its_flow_mapping() {
        let text = "components:\n  metal3:\n    baremetalOperator:\n      manager: {}\n      plugin: { }\n";
        let out = edit(
            text,
            &[
                change(
                    "components.metal3.baremetalOperator.manager",
                    "sha256",
                    "aa",
                ),
                change("components.metal3.baremetalOperator.plugin", "sha256", "bb"),
            ],
        )
        .unwrap();
        assert_eq!(
            out,
            "components:\n  metal3:\n    baremetalOperator:\n      manager: {sha256: aa}\n      plugin: {sha256: bb }\n"
        );
        let mut s = crate::spec::tests::metal3_spec(|t| t).unwrap();
        set_pin(
            &mut s,
            &change("components.metal3.baremetalOperator.plugin", "sha256", "cc"),
        )
        .unwrap();
        let b = &s.components.metal3.unwrap().baremetal_operator;
        assert_eq!(b.plugin.sha256.as_deref(), Some("cc"));
    }

    #[test]
    fn quoted_values_are_replaced_whole_and_crlf_is_kept() {
        let text = "a:\r\n  url: x\r\n  sha256: \"old\"\r\nb: {url: y, sha256: 'old'}\r\nc:\r\n  url: z\r\n";
        let out = edit(
            text,
            &[
                change("a", "sha256", "n1"),
                change("b", "sha256", "n2"),
                change("c", "sha256", "n3"),
            ],
        )
        .unwrap();
        assert_eq!(
            out,
            "a:\r\n  url: x\r\n  sha256: n1\r\nb: {url: y, sha256: n2}\r\nc:\r\n  url: z\r\n  sha256: n3\r\n"
        );
    }

    #[test]
    fn what_cannot_be_edited_is_refused_with_the_value_to_set() {
        let e = edit("a: {path: x}\n", &[change("a", "sha256", "n")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("a has no url; set a.sha256: n by hand"),
            "{e}"
        );
        let e = edit(
            "x: &u https://h\na:\n  url: *u\n",
            &[change("a", "sha256", "n")],
        )
        .unwrap_err();
        assert!(e.to_string().contains("a.url is not a plain value"), "{e}");
        let e = edit("a: [1]\n", &[change("a", "sha256", "n")]).unwrap_err();
        assert!(e.to_string().contains("a is not a mapping"), "{e}");
    }

    #[test]
    fn a_change_sets_the_pin_of_its_field() {
        let mut s = spec::parse(
            "name: t\nbase: {suite: bookworm}\nhostname: t\noutputs: {formats: [raw], diskSize: 4GiB}\n\
             network: {provisioning: {interface: ens4, address: 172.22.0.1/24}}\n\
             components:\n  kubernetes: {version: v1.35.4, kubelet: {go: k8s.io/kubernetes/cmd/kubelet@v1.35.4}, \
             kubeApiserver: {url: 'https://h/a'}, kubeControllerManager: {url: 'https://h/c'}, \
             kubeScheduler: {url: 'https://h/s'}, kubeProxy: {url: 'https://h/p'}, kubectl: {url: 'https://h/k'}, \
             kubeadm: {url: 'https://h/ka'}, pause: {reference: 'r.io/p:1', binary: {cc: k8s.io/kubernetes/p.c@v1.35.4}}, \
             coredns: {reference: 'r.io/c:1', binary: {go: github.com/coredns/coredns@v1.13.1}}}\n  \
             manifests: [{url: 'https://h/m'}]\n  files: [{url: 'https://h/f', dest: /f}]\n  \
             images: [{reference: 'quay.io/a/b:1'}]\n",
        )
        .unwrap();
        for field in [
            "components.kubernetes.kubelet",
            "components.kubernetes.kubeApiserver",
            "components.kubernetes.kubeControllerManager",
            "components.kubernetes.kubeScheduler",
            "components.kubernetes.kubeProxy",
            "components.kubernetes.kubectl",
            "components.kubernetes.kubeadm",
            "components.kubernetes.pause.binary",
            "components.kubernetes.coredns.binary",
            "components.manifests[0]",
            "components.files[0]",
        ] {
            set_pin(&mut s, &change(field, "sha256", &"a".repeat(64))).unwrap();
        }
        set_pin(
            &mut s,
            &change(
                "components.images[0]",
                "digest",
                &format!("sha256:{}", "b".repeat(64)),
            ),
        )
        .unwrap();
        s.validate().unwrap();
        assert!(set_pin(&mut s, &change("components.files[1]", "sha256", "a")).is_err());
    }
}
