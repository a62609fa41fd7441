//! The patches `packages/appliance.yaml` carries on baremetal-operator apply to its pinned source, and BMO's own
//! tests of the package they change pass with them: each patch adds a test there that fails without it (checked
//! by hand when it was written). Needs Go and the archives `scripts/third-party.sh` links into `third_party/`.

use std::path::Path;
use std::process::Command;

use foothold_image_builder::source::Recipe;

#[test]
fn the_carried_patches_apply_and_bmo_s_own_tests_of_what_they_change_pass() {
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packages/appliance.yaml");
    let loaded = foothold_image_builder::spec::load(&spec).unwrap();
    let bmo = &loaded
        .spec
        .components
        .metal3
        .as_ref()
        .unwrap()
        .baremetal_operator;
    assert_eq!(
        bmo.patches.len(),
        2,
        "the test names what each patch changes"
    );
    let [(_, manager), _] = bmo.binaries();
    let Recipe::Archive(recipe) = Recipe::Archive(manager.archive.unwrap())
        .located(&loaded.dir, |_| unreachable!("every archive is a path"))
    else {
        unreachable!()
    };
    let work = tempfile::tempdir().unwrap();
    let (root, _) = foothold_image_builder::go_archive::prepare(&recipe, work.path()).unwrap();
    let out = Command::new("go")
        // -trimpath, as the builder builds BMO: the packages both compile come from Go's cache once either has.
        .args([
            "test",
            "-trimpath",
            "-count=1",
            "./internal/controller/metal3.io/",
        ])
        // The firmware controllers' tests and the host controller's of firmware, the patches' among them.
        .args(["-run", "Firmware|Schema", "-v"])
        .current_dir(&root)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod -buildvcs=false")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for test in [
        "TestOwnedFirmwareSchemaIsNotWrittenAgain",
        "TestFirmwareComponentsAskedForOnlyUntilTheResourceExists",
    ] {
        assert!(printed.contains(&format!("--- PASS: {test} ")), "{printed}");
    }
}
