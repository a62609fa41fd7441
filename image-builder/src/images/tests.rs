//! Which platforms of an index are kept, and the names images are served under: from values (the pulls
//! themselves run in `tests/container_images.rs`).

use super::*;
use crate::spec::tests::image;

#[test]
fn an_index_keeps_the_wanted_platforms_only() {
    let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let index = json!({"manifests": [
        {"digest": d('1'), "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": d('2'), "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        {"digest": d('3'), "platform": {"os": "unknown", "architecture": "unknown"}},
        {"digest": d('4')},
    ]})
    .to_string();
    let (m, b) = children(index.as_bytes(), &["linux/amd64".into()]).unwrap();
    assert_eq!((m, b.len()), (vec![d('1')], 0));
    let (m, _) = children(
        index.as_bytes(),
        &["linux/arm64".into(), "linux/amd64".into()],
    )
    .unwrap();
    assert_eq!(m, vec![d('1'), d('2')]);
    let (m, _) = children(index.as_bytes(), &["linux/arm64/v7".into()])
        .err()
        .map(|e| (vec![e.to_string()], ()))
        .unwrap();
    assert!(
        m[0].contains("linux/arm64/v8") && m[0].contains("linux/arm64/v7"),
        "{m:?}"
    );
    let manifest =
        json!({"config": {"digest": d('c')}, "layers": [{"digest": d('5')}, {"digest": d('6')}]})
            .to_string();
    let (m, b) = children(manifest.as_bytes(), &[]).unwrap();
    assert!(m.is_empty());
    assert_eq!(b, vec![d('c'), d('5'), d('6')]);
    let foreign = json!({"config": {"digest": d('c')}, "layers": [{"digest": d('5'), "urls": ["https://x"]}]}).to_string();
    assert!(children(foreign.as_bytes(), &[])
        .unwrap_err()
        .to_string()
        .contains("foreign"));
    assert!(children(b"{}", &[]).is_err());
}

#[test]
fn served_names_drop_the_digest() {
    let mut im = image("quay.io/a/b:1");
    assert_eq!(served_name(&im), "quay.io/a/b:1");
    im.reference = format!("quay.io/a/b@{}", im.pinned());
    assert_eq!(served_name(&im), "quay.io/a/b");
}
