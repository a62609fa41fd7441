//! The appliance specs in `packages/`: each reads and validates (pins aside), and what `pin` would write into
//! one makes it complete.

use std::path::{Path, PathBuf};

use foothold_image_builder::pin::{edit, Change};
use foothold_image_builder::spec::{self, Pins};

fn packages() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packages")
}

#[test]
fn every_spec_in_packages_validates_pins_aside() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(packages()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            spec::load_with(&path, Pins::Optional).unwrap_or_else(|e| panic!("{e}"));
            seen.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    seen.sort();
    assert_eq!(seen, ["appliance.yaml", "lab.yaml"]);
}

#[test]
fn the_appliance_is_complete_once_pinned() {
    let path = packages().join("appliance.yaml");
    let loaded = spec::load_with(&path, Pins::Optional).unwrap();
    // Its local inputs are in the repository (the agent is built into target/).
    for (field, f) in loaded.spec.file_inputs() {
        if let Some(p) = &f.path {
            assert!(
                loaded.resolve(p).is_file(),
                "{field}: {} is missing",
                p.display()
            );
        }
        if let Some(u) = &f.url {
            assert!(u.starts_with("https://"), "{field}: {u} is not https");
        }
    }
    let unpinned: Vec<Change> = loaded
        .spec
        .file_inputs()
        .into_iter()
        .filter(|(_, f)| f.url.is_some() && f.sha256.is_none())
        .map(|(field, _)| Change {
            field,
            key: "sha256",
            old: None,
            new: "0123456789abcdef".repeat(4),
        })
        .chain(
            loaded
                .spec
                .components
                .images
                .iter()
                .enumerate()
                .filter(|(_, im)| im.digest.is_none())
                .map(|(i, _)| Change {
                    field: format!("components.images[{i}]"),
                    key: "digest",
                    old: None,
                    new: format!("sha256:{}", "0123456789abcdef".repeat(4)),
                }),
        )
        .collect();
    let text = std::fs::read_to_string(&path).unwrap();
    let pinned = edit(&text, &unpinned).unwrap();
    spec::parse(&pinned)
        .unwrap()
        .validate()
        .unwrap_or_else(|e| panic!("appliance.yaml, pinned: {e}"));
}
