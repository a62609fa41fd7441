//! Repository names and tags, per the distribution-spec grammar. Pure functions: no I/O.

/// Clients limit `<host>/<name>` to 255 characters; we keep names well inside that.
pub const MAX_NAME_LEN: usize = 255;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    #[error("repository name is empty")]
    Empty,
    #[error("repository name is longer than {MAX_NAME_LEN} characters")]
    TooLong,
    #[error("repository name component {0:?} does not match [a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*")]
    BadComponent(String),
    #[error("tag {0:?} does not match [a-zA-Z0-9_][a-zA-Z0-9._-]{{0,127}}")]
    BadTag(String),
    #[error("mirror namespace {0:?} is not a registry host name")]
    BadNamespace(String),
}

/// Validate a repository name (`a/b/c`).
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    for component in name.split('/') {
        if !valid_component(component) {
            return Err(NameError::BadComponent(component.to_owned()));
        }
    }
    Ok(())
}

fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    // Separators: '.', '_', '__', or any run of '-', always between alphanumerics.
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

pub fn validate_tag(tag: &str) -> Result<(), NameError> {
    let b = tag.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|&x| x.is_ascii_alphanumeric() || b"._-".contains(&x));
    if ok {
        Ok(())
    } else {
        Err(NameError::BadTag(tag.to_owned()))
    }
}

/// containerd, when it uses us as a mirror, adds `?ns=<upstream host>` (e.g. `docker.io`, `quay.io`,
/// `registry.example:5000`). Images are stored under `<host>/<path>` so they keep their original names.
/// The host becomes the first path component, so it must itself be a valid name component: a port is
/// written as `host-5000`? No — we refuse ports rather than invent a mapping an operator would not guess.
pub fn mirrored_name(ns: &str, name: &str) -> Result<String, NameError> {
    let host_ok = !ns.is_empty()
        && ns.len() <= 253
        && ns
            .split('.')
            .all(|label| valid_component(label) && !label.contains('_'));
    if !host_ok {
        return Err(NameError::BadNamespace(ns.to_owned()));
    }
    let full = format!("{ns}/{name}");
    validate_name(&full)?;
    Ok(full)
}

/// Splits a reference `repo[:tag][@digest]` into repository and tag (the digest is dropped).
pub fn split_reference(r: &str) -> (String, Option<String>) {
    let r = r.split('@').next().unwrap_or(r);
    let slash = r.rfind('/').map(|i| i + 1).unwrap_or(0);
    match r[slash..].rfind(':') {
        Some(i) => (
            r[..slash + i].to_owned(),
            Some(r[slash + i + 1..].to_owned()),
        ),
        None => (r.to_owned(), None),
    }
}

/// The full name a container runtime gives a reference, as the registry stores it (the upstream host is the
/// first component, as `mirrored_name` makes it): `busybox:1` → (`docker.io/library/busybox`, `1`),
/// `quay.io/a/b` → (`quay.io/a/b`, None). Docker's rules: a first component with a `.` or `:`, or
/// `localhost`, is a host; otherwise the host is docker.io, and a single component lives in `library/`.
pub fn normalize_reference(r: &str) -> Result<(String, Option<String>), NameError> {
    let (repo, tag) = split_reference(r);
    let (host, path) = match repo.split_once('/') {
        Some((h, p)) if h.contains(['.', ':']) || h == "localhost" => (h, p.to_owned()),
        Some(_) => ("docker.io", repo.clone()),
        None => ("docker.io", format!("library/{repo}")),
    };
    let host = if host == "index.docker.io" {
        "docker.io"
    } else {
        host
    };
    let full = mirrored_name(host, &path)?;
    if let Some(t) = &tag {
        validate_tag(t)?;
    }
    Ok((full, tag))
}

/// Path segment characters left as they are (RFC 3986 unreserved).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `s` as one URL path segment: everything but RFC 3986's unreserved characters percent-encoded.
pub fn url_segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in [
            "a",
            "library/nginx",
            "docker.io/library/nginx",
            "a-b/c__d/e.f",
            "a--b",
            "x/y/z/w",
        ] {
            assert_eq!(validate_name(good), Ok(()), "{good}");
        }
        for bad in [
            "", "A", "a/", "/a", "a//b", "..", "a/../b", "a/./b", "-a", "a-", "a___b", "a..b",
            "a b", "a:b", "a\0b",
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(validate_name(&"a".repeat(256)), Err(NameError::TooLong));
        assert_eq!(validate_name(&"a".repeat(255)), Ok(()));
    }

    #[test]
    fn tags() {
        for good in ["latest", "v1.0", "_x", "A-b.c_d", &"a".repeat(128)] {
            assert_eq!(validate_tag(good), Ok(()), "{good}");
        }
        for bad in ["", ".x", "-x", "a/b", "a:b", &"a".repeat(129)] {
            assert!(validate_tag(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn mirror_names_keep_the_upstream_host() {
        assert_eq!(
            mirrored_name("docker.io", "library/nginx").unwrap(),
            "docker.io/library/nginx"
        );
        assert_eq!(
            mirrored_name("registry.k8s.io", "pause").unwrap(),
            "registry.k8s.io/pause"
        );
        assert!(mirrored_name("Docker.IO", "x").is_err());
        assert!(mirrored_name("host:5000", "x").is_err());
        assert!(mirrored_name("", "x").is_err());
    }

    #[test]
    fn references_split_and_normalize() {
        assert_eq!(
            split_reference("localhost:5000/a/b"),
            ("localhost:5000/a/b".into(), None)
        );
        assert_eq!(
            split_reference("quay.io/x/y:v1@sha256:00"),
            ("quay.io/x/y".into(), Some("v1".into()))
        );
        let n = |r: &str| normalize_reference(r).map(|(a, b)| (a, b.unwrap_or_default()));
        assert_eq!(
            n("busybox:1.36"),
            Ok(("docker.io/library/busybox".into(), "1.36".into()))
        );
        assert_eq!(
            n("foothold/app:v1"),
            Ok(("docker.io/foothold/app".into(), "v1".into()))
        );
        assert_eq!(
            n("docker.io/foothold/app:v1"),
            Ok(("docker.io/foothold/app".into(), "v1".into()))
        );
        assert_eq!(
            n("index.docker.io/library/nginx"),
            Ok(("docker.io/library/nginx".into(), String::new()))
        );
        assert_eq!(
            n("registry.k8s.io/pause:3.9"),
            Ok(("registry.k8s.io/pause".into(), "3.9".into()))
        );
        assert_eq!(n("localhost/x:y"), Ok(("localhost/x".into(), "y".into())));
        for bad in ["Busybox:1", "host:5000/a:b", "a:b:c", "a:-x", "../x:1", ""] {
            assert!(normalize_reference(bad).is_err(), "{bad:?}");
        }
    }
}
