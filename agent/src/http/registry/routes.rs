//! Parsing `/v2/...` paths into routes. Repository names contain slashes, so routes are matched from the end
//! of the path. Pure: a unit- and property-testable function of the path string.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Base,
    Catalog,
    Manifest {
        name: String,
        reference: String,
    },
    Blob {
        name: String,
        digest: String,
    },
    /// `POST /v2/<name>/blobs/uploads/`
    UploadStart {
        name: String,
    },
    /// `/v2/<name>/blobs/uploads/<id>`
    Upload {
        name: String,
        id: String,
    },
    Tags {
        name: String,
    },
    Referrers {
        name: String,
        digest: String,
    },
}

impl Route {
    /// A short label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Base => "base",
            Route::Catalog => "catalog",
            Route::Manifest { .. } => "manifest",
            Route::Blob { .. } => "blob",
            Route::UploadStart { .. } | Route::Upload { .. } => "upload",
            Route::Tags { .. } => "tags",
            Route::Referrers { .. } => "referrers",
        }
    }

    pub fn name(&self) -> Option<&str> {
        match self {
            Route::Base | Route::Catalog => None,
            Route::Manifest { name, .. }
            | Route::Blob { name, .. }
            | Route::UploadStart { name }
            | Route::Upload { name, .. }
            | Route::Tags { name }
            | Route::Referrers { name, .. } => Some(name),
        }
    }
}

/// Parses a request path (without query). None for paths that are not registry routes.
pub fn parse(path: &str) -> Option<Route> {
    let rest = path.strip_prefix("/v2")?;
    if rest.is_empty() || rest == "/" {
        return Some(Route::Base);
    }
    let rest = rest.strip_prefix('/')?;
    if rest == "_catalog" {
        return Some(Route::Catalog);
    }
    let segs: Vec<&str> = rest.split('/').collect();
    let n = segs.len();
    let name = |k: usize| -> Option<String> {
        // The name is everything before the last k segments; it must be non-empty.
        (n > k).then(|| segs[..n - k].join("/"))
    };
    if n >= 3 && segs[n - 2] == "blobs" && segs[n - 1] == "uploads" {
        return Some(Route::UploadStart { name: name(2)? });
    }
    if n >= 4 && segs[n - 3] == "blobs" && segs[n - 2] == "uploads" {
        let id = segs[n - 1];
        return Some(if id.is_empty() {
            Route::UploadStart { name: name(3)? }
        } else {
            Route::Upload {
                name: name(3)?,
                id: id.to_owned(),
            }
        });
    }
    if n >= 3 && segs[n - 2] == "manifests" {
        return Some(Route::Manifest {
            name: name(2)?,
            reference: segs[n - 1].to_owned(),
        });
    }
    if n >= 3 && segs[n - 2] == "blobs" {
        return Some(Route::Blob {
            name: name(2)?,
            digest: segs[n - 1].to_owned(),
        });
    }
    if n >= 3 && segs[n - 2] == "tags" && segs[n - 1] == "list" {
        return Some(Route::Tags { name: name(2)? });
    }
    if n >= 3 && segs[n - 2] == "referrers" {
        return Some(Route::Referrers {
            name: name(2)?,
            digest: segs[n - 1].to_owned(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> String {
        x.to_owned()
    }

    #[test]
    fn routes() {
        assert_eq!(parse("/v2/"), Some(Route::Base));
        assert_eq!(parse("/v2"), Some(Route::Base));
        assert_eq!(parse("/v2/_catalog"), Some(Route::Catalog));
        assert_eq!(
            parse("/v2/docker.io/library/nginx/manifests/1.25"),
            Some(Route::Manifest {
                name: s("docker.io/library/nginx"),
                reference: s("1.25")
            })
        );
        assert_eq!(
            parse("/v2/a/blobs/sha256:00"),
            Some(Route::Blob {
                name: s("a"),
                digest: s("sha256:00")
            })
        );
        assert_eq!(
            parse("/v2/a/b/blobs/uploads/"),
            Some(Route::UploadStart { name: s("a/b") })
        );
        assert_eq!(
            parse("/v2/a/b/blobs/uploads"),
            Some(Route::UploadStart { name: s("a/b") })
        );
        assert_eq!(
            parse("/v2/a/blobs/uploads/123"),
            Some(Route::Upload {
                name: s("a"),
                id: s("123")
            })
        );
        assert_eq!(parse("/v2/a/tags/list"), Some(Route::Tags { name: s("a") }));
        assert_eq!(
            parse("/v2/a/referrers/sha256:1"),
            Some(Route::Referrers {
                name: s("a"),
                digest: s("sha256:1")
            })
        );
        // Names may contain the words routes use.
        assert_eq!(
            parse("/v2/blobs/manifests/manifests/x"),
            Some(Route::Manifest {
                name: s("blobs/manifests"),
                reference: s("x")
            })
        );
        assert_eq!(parse("/v2/manifests/x"), None);
        assert_eq!(parse("/v3/a/manifests/x"), None);
        assert_eq!(parse("/v2/a/unknown/x"), None);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        // Components that include the words routes are made of, to test matching from the end.
        let component = prop_oneof![
            "[a-z0-9]{1,8}",
            Just("blobs".to_owned()),
            Just("manifests".to_owned()),
            Just("uploads".to_owned())
        ];
        prop::collection::vec(component, 1..5).prop_map(|c| c.join("/"))
    }

    proptest! {
        #[test]
        fn every_route_parses_back(name in name(), reference in "[a-zA-Z0-9_][a-zA-Z0-9._-]{0,20}", id in "[a-f0-9-]{1,36}") {
            prop_assert_eq!(parse(&format!("/v2/{name}/manifests/{reference}")), Some(Route::Manifest { name: name.clone(), reference: reference.clone() }));
            prop_assert_eq!(parse(&format!("/v2/{name}/blobs/sha256:{reference}")), Some(Route::Blob { name: name.clone(), digest: format!("sha256:{reference}") }));
            prop_assert_eq!(parse(&format!("/v2/{name}/blobs/uploads/")), Some(Route::UploadStart { name: name.clone() }));
            prop_assert_eq!(parse(&format!("/v2/{name}/blobs/uploads/{id}")), Some(Route::Upload { name: name.clone(), id }));
            prop_assert_eq!(parse(&format!("/v2/{name}/tags/list")), Some(Route::Tags { name: name.clone() }));
            prop_assert_eq!(parse(&format!("/v2/{name}/referrers/sha256:{reference}")), Some(Route::Referrers { name, digest: format!("sha256:{reference}") }));
        }
    }
}
