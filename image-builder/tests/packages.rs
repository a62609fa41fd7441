//! The appliance specs in `packages/`: each reads and validates (pins aside) in the current format, the
//! appliance is pinned, and the JSON Schema published beside them for editors is the builder's.

use std::path::{Path, PathBuf};

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
            let loaded = spec::load_with(&path, Pins::Optional).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                loaded.warnings.is_empty(),
                "{}: {:?}",
                path.display(),
                loaded.warnings
            );
            seen.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        ["appliance.yaml", "ipa.yaml", "lab.yaml", "node.yaml"]
    );
}

#[test]
fn the_appliance_is_pinned_and_its_local_inputs_are_in_the_repository() {
    let path = packages().join("appliance.yaml");
    // Every input pinned: it builds as committed.
    let loaded = spec::load(&path).unwrap_or_else(|e| panic!("{e}"));
    // The deploy ramdisk is packages/ipa.yaml's output, built into out/ipa first: named as that spec names it.
    let ipa = spec::load(&packages().join("ipa.yaml")).unwrap_or_else(|e| panic!("{e}"));
    for (field, f) in loaded.spec.sources() {
        if let Some(p) = &f.path {
            if let Ok(built) = p.strip_prefix("../out/ipa") {
                let part = field.rsplit('.').next().unwrap();
                assert!(
                    field.starts_with("components.metal3.deployRamdisk."),
                    "{field}"
                );
                assert_eq!(
                    built.to_str().unwrap(),
                    format!("{}.{part}", ipa.spec.name),
                    "{field}"
                );
                continue;
            }
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
    let k = loaded.spec.components.kubernetes.as_ref().unwrap();
    assert_eq!(k.version, "v1.35.4");
    // Everything Kubernetes runs is built here from source.
    for (field, f) in loaded.spec.sources() {
        if field.starts_with("components.kubernetes.") {
            assert!(f.recipe().is_some(), "{field} is not built from source");
        }
    }
}

#[test]
fn the_published_schema_is_the_builders() {
    let path = packages().join("spec.schema.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let now = serde_json::to_string_pretty(&spec::schema()).unwrap() + "\n";
    assert!(
        committed == now,
        "{} is not what `foothold-build schema` prints: run `foothold-build schema > packages/spec.schema.json`",
        path.display()
    );
}
