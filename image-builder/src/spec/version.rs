//! Which format a spec is written in: `apiVersion: foothold.io/v1alpha1` and `kind: Image` at its top, so that a
//! later format can be told apart and a spec moved to it by `foothold-build migrate`. A spec written before
//! they existed (without them) still loads as this version, with a warning naming the command that adds them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The versions of the spec format this builder reads.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ApiVersion {
    /// The only one so far.
    #[serde(rename = "foothold.io/v1alpha1")]
    V1alpha1,
}

impl ApiVersion {
    pub const CURRENT: ApiVersion = ApiVersion::V1alpha1;

    pub fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V1alpha1 => "foothold.io/v1alpha1",
        }
    }
}

/// What a spec describes: an image `foothold-build build` makes (an appliance, a node, a ramdisk).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Kind {
    Image,
}

/// The warning a spec gets for what it lacks of `apiVersion` and `kind`, if anything.
pub fn warning(api_version: Option<ApiVersion>, kind: Option<Kind>) -> Option<String> {
    let missing: Vec<&str> = [
        ("apiVersion", api_version.is_none()),
        ("kind", kind.is_none()),
    ]
    .iter()
    .filter(|(_, m)| *m)
    .map(|(name, _)| *name)
    .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "no {}: read as {} {:?}; `foothold-build migrate` writes {} into the file",
            missing.join(" and "),
            ApiVersion::CURRENT.as_str(),
            Kind::Image,
            if missing.len() == 1 { "it" } else { "them" }
        )
    })
}

/// `text` with the `apiVersion` and `kind` lines it lacks (`has_*`: whether it has them) put before its first
/// key, after the comments, blank lines and YAML directives it starts with; the rest of it byte for byte.
pub fn migrate_text(text: &str, has_api_version: bool, has_kind: bool) -> String {
    let mut lines = String::new();
    if !has_api_version {
        lines.push_str(&format!("apiVersion: {}\n", ApiVersion::CURRENT.as_str()));
    }
    if !has_kind {
        lines.push_str(&format!("kind: {:?}\n", Kind::Image));
    }
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        let header = t.is_empty() || t.starts_with('#') || t.starts_with('%') || t == "---";
        if !header {
            break;
        }
        at += line.len();
    }
    let mut out = String::with_capacity(text.len() + lines.len());
    out.push_str(&text[..at]);
    if at > 0 && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&lines);
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{load_text, Pins};
    use std::path::Path;

    const BODY: &str =
        "name: lab\nbase: {suite: trixie}\nhostname: lab\noutputs: {formats: [raw], diskSize: 2GiB}\n";

    #[test]
    fn the_lines_go_after_the_header_and_the_rest_is_kept_byte_for_byte() {
        let text = format!("# A lab.\n#\n---\n{BODY}# a comment below\n");
        let out = migrate_text(&text, false, false);
        assert_eq!(
            out,
            format!("# A lab.\n#\n---\napiVersion: foothold.io/v1alpha1\nkind: Image\n{BODY}# a comment below\n")
        );
        let loaded = load_text(Path::new("lab.yaml"), &out, Pins::Required).unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(loaded.spec.api_version, Some(ApiVersion::V1alpha1));
        // Only what is missing.
        let half = migrate_text(&format!("kind: Image\n{BODY}"), false, true);
        assert_eq!(
            half,
            format!("apiVersion: foothold.io/v1alpha1\nkind: Image\n{BODY}")
        );
        // A file of comments only has them first.
        assert_eq!(
            migrate_text("# only this", false, false),
            "# only this\napiVersion: foothold.io/v1alpha1\nkind: Image\n"
        );
    }

    #[test]
    fn a_spec_without_them_loads_with_a_warning_and_a_wrong_one_is_refused() {
        let loaded = load_text(Path::new("lab.yaml"), BODY, Pins::Required).unwrap();
        assert_eq!(
            loaded.warnings,
            ["no apiVersion and kind: read as foothold.io/v1alpha1 Image; `foothold-build migrate` writes them into the file"]
        );
        let loaded = load_text(
            Path::new("lab.yaml"),
            &format!("kind: Image\n{BODY}"),
            Pins::Required,
        )
        .unwrap();
        assert_eq!(
            loaded.warnings,
            ["no apiVersion: read as foothold.io/v1alpha1 Image; `foothold-build migrate` writes it into the file"]
        );
        for (line, want) in [
            (
                "apiVersion: foothold.io/v2",
                "line 1 column 13: unknown variant `foothold.io/v2`, expected one of foothold.io/v1alpha1",
            ),
            ("kind: Cluster", "line 1 column 7: unknown variant `Cluster`, expected one of Image"),
        ] {
            let err = load_text(
                Path::new("lab.yaml"),
                &format!("{line}\n{BODY}"),
                Pins::Required,
            )
            .err()
            .unwrap_or_else(|| panic!("{line} loaded"))
            .to_string();
            assert!(
                err.starts_with("lab.yaml: ") && err.contains(want),
                "{line}: {err}"
            );
        }
    }
}
