//! Names of the objects a reconciler makes for another: `<parent>-<suffix>` when that is a valid name of at
//! most 63 characters (names are also label values), else shortened with a hash of the whole so that two
//! different parents or suffixes never share a name.

use sha2::Digest as _;

/// The longest name that is also a label value.
pub const MAX: usize = 63;
/// Hex digits of the hash in a shortened name.
const HASH: usize = 8;
/// A shortened name keeps at least this much of its parent (all of a shorter one).
const PARENT_AT_LEAST: usize = 16;

/// A child object's name: `<parent>-<suffix>`, or `<parent head>-<hash>-<suffix head>` of at most [`MAX`]
/// characters, where the hash is of the whole `<parent>-<suffix>`. Parent and suffix are DNS labels
/// (lower-case letters, digits, `-`); the result is one too.
pub fn child_name(parent: &str, suffix: &str) -> String {
    let full = format!("{parent}-{suffix}");
    if full.len() <= MAX {
        return full;
    }
    let hash = hex::encode(sha2::Sha256::digest(full.as_bytes()))[..HASH].to_owned();
    // The parent and the suffix share what the hash and its two dashes leave; a long suffix (a node's name)
    // gives way before the parent's first characters do.
    let room = MAX - HASH - 2;
    let suffix_len = suffix.len().min(room - parent.len().min(PARENT_AT_LEAST));
    let parent_len = parent.len().min(room - suffix_len);
    let trim = |s: &str| s.trim_matches(['-', '.']).to_owned();
    let head = trim(&parent[..parent_len]);
    let tail = trim(&suffix[..suffix_len]);
    match (head.is_empty(), tail.is_empty()) {
        (false, false) => format!("{head}-{hash}-{tail}"),
        (false, true) => format!("{head}-{hash}"),
        (true, false) => format!("{hash}-{tail}"),
        (true, true) => hash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn is_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= MAX
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn a_name_that_fits_is_kept_whole() {
        assert_eq!(child_name("site-a", "vnc"), "site-a-vnc");
        let parent = "p".repeat(59);
        assert_eq!(child_name(&parent, "abc"), format!("{parent}-abc"));
    }

    /// ViNO names a node's ConfigMap `child_name(vino, "node-<node>")`, and node names go to 253 characters:
    /// the old arithmetic (`63 - suffix.len() - 10`) underflowed, a panic in debug builds and a name over 63
    /// characters in release.
    #[test]
    fn a_long_suffix_is_shortened_too() {
        let node = format!("worker-{}", "x".repeat(240));
        let name = child_name("vino-test", &format!("node-{node}"));
        assert!(is_label(&name), "{name}");
        assert!(name.starts_with("vino-test-"), "{name}");
        let other = child_name("vino-test", &format!("node-{node}y"));
        assert_ne!(name, other, "the hash tells two long suffixes apart");
    }

    #[test]
    fn a_shortened_name_keeps_the_head_of_its_parent_and_suffix() {
        let name = child_name(&"a".repeat(60), "bmc-credentials");
        assert_eq!(name.len(), MAX, "{name}");
        assert!(name.ends_with("-bmc-credentials"), "{name}");
        assert!(name.starts_with(&"a".repeat(38)), "{name}");
    }

    /// Objects already in clusters were named by the old scheme; every name it made without overflowing stays.
    #[test]
    fn names_the_old_scheme_made_are_unchanged() {
        let old = |parent: &str, suffix: &str| {
            let full = format!("{parent}-{suffix}");
            if full.len() <= 63 {
                return full;
            }
            let hash = hex::encode(&sha2::Sha256::digest(full.as_bytes())[..4]);
            let keep = 63 - suffix.len() - hash.len() - 2;
            let head: String = parent.chars().take(keep).collect();
            format!("{}-{hash}-{suffix}", head.trim_end_matches(['-', '.']))
        };
        for parent in ["site", &"a".repeat(50), &"long-parent-".repeat(5)] {
            for suffix in ["vnc", "bmc-credentials", "install-g12-p3", &"s".repeat(37)] {
                assert_eq!(
                    child_name(parent, suffix),
                    old(parent, suffix),
                    "{parent} {suffix}"
                );
            }
        }
    }

    fn label(max: usize) -> impl Strategy<Value = String> {
        proptest::string::string_regex(&format!("[a-z0-9]([a-z0-9-]{{0,{}}}[a-z0-9])?", max - 2))
            .unwrap()
    }

    proptest! {
        #[test]
        fn every_name_is_a_label_of_at_most_63_and_tells_inputs_apart(
            parent in label(63),
            suffix in label(253),
            other in label(253),
        ) {
            let name = child_name(&parent, &suffix);
            prop_assert!(is_label(&name), "{name}");
            prop_assert_eq!(&name, &child_name(&parent, &suffix));
            if parent.len() + 1 + suffix.len() <= MAX {
                prop_assert_eq!(&name, &format!("{parent}-{suffix}"));
            }
            if other != suffix {
                prop_assert_ne!(name, child_name(&parent, &other));
            }
        }
    }
}
