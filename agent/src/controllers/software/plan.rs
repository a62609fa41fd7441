//! The pure part of the `Software` reconciler: resolve each package of the spec against the cluster's
//! `binary_images` records and write the package manifest the installer Job reads. No I/O, so it is tested
//! exhaustively here.
//!
//! A package `name` is the record `name`; `{name: {version: v}}` is the record `name-v`. Nodes download it from
//! `<advertise-url>/files/<owner>/<cluster>/binary_images/<record>` and can check it against the `sha256` in the
//! manifest (or the `.sha256sum` next to it).

use serde_json::json;

use crate::controllers::common::Ownership;
use crate::crd::bpa::{Package, PackageStatus, SoftwareSpec};

/// On every object the reconciler creates: the Software's name.
pub const OWNER_LABEL: &str = "bpa.akraino.org/software";
/// How the objects are marked: the Software's name and generation (BPA's keys: Software is BPA's resource).
pub const OWNERSHIP: Ownership = Ownership {
    owner_label: OWNER_LABEL,
    generation_label: "bpa.akraino.org/generation",
};

/// The inventory group masterSoftware goes to.
pub const MASTER_GROUP: &str = "kube_control_plane";
/// The inventory group workerSoftware goes to.
pub const WORKER_GROUP: &str = "kube_node";

/// A `binary_images` record of the cluster, as far as the plan needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uploaded {
    pub name: String,
    pub complete: bool,
    /// The content's sha256 (hex) once complete.
    pub sha256: Option<String>,
}

/// Where the agent's file server is reachable for nodes, and whose records to read.
#[derive(Clone, Debug)]
pub struct Files<'a> {
    /// `--advertise-url`, e.g. `http://10.0.0.1:5000`; None when the agent was not told it.
    pub base_url: Option<&'a str>,
    pub owner: &'a str,
    pub cluster: &'a str,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// One entry per record, in spec order (masters first).
    pub packages: Vec<PackageStatus>,
    /// Problems of the spec itself: nothing but a spec change fixes them.
    pub spec_errors: Vec<String>,
    /// Problems an upload (or `--advertise-url`) fixes.
    pub missing: Vec<String>,
    /// The manifest for the installer, when everything is resolved.
    pub manifest: Option<String>,
}

use crate::names::url_segment as segment;

/// The `/files` URL of `record`.
pub fn file_url(base_url: &str, owner: &str, cluster: &str, record: &str) -> String {
    format!(
        "{}/files/{}/{}/binary_images/{}",
        base_url.trim_end_matches('/'),
        segment(owner),
        segment(cluster),
        segment(record)
    )
}

pub fn plan(spec: &SoftwareSpec, uploaded: &[Uploaded], files: &Files<'_>) -> Plan {
    let mut plan = Plan::default();
    for (items, group, field) in [
        (&spec.master_software, MASTER_GROUP, "masterSoftware"),
        (&spec.worker_software, WORKER_GROUP, "workerSoftware"),
    ] {
        let mut seen = std::collections::BTreeMap::<String, Option<String>>::new();
        for item in items {
            let package = match Package::parse(item) {
                Ok(p) => p,
                Err(e) => {
                    plan.spec_errors.push(format!("{field}: {e}"));
                    continue;
                }
            };
            if let Some(earlier) = seen.insert(package.name.clone(), package.version.clone()) {
                plan.spec_errors.push(format!(
                    "{field}: package {} is listed twice{}",
                    package.name,
                    if earlier == package.version {
                        String::new()
                    } else {
                        format!(
                            " ({} and {})",
                            earlier.as_deref().unwrap_or("unversioned"),
                            package.version.as_deref().unwrap_or("unversioned")
                        )
                    }
                ));
                continue;
            }
            let record = match &package.version {
                Some(v) => format!("{}-{v}", package.name),
                None => package.name.clone(),
            };
            if let Err(e) = crate::images::validate_name("its record name", &record) {
                plan.spec_errors
                    .push(format!("{field}: package {}: {e}", package.name));
                continue;
            }
            match plan.packages.iter_mut().find(|p| p.record == record) {
                Some(p) => {
                    p.groups.push(group.to_owned());
                    p.drain |= package.drain;
                }
                None => plan.packages.push(PackageStatus {
                    name: package.name,
                    version: package.version,
                    groups: vec![group.to_owned()],
                    record,
                    drain: package.drain,
                    ..PackageStatus::default()
                }),
            }
        }
    }
    for p in &mut plan.packages {
        let problem = match uploaded.iter().find(|u| u.name == p.record) {
            None => Some(format!(
                "no binary_images record {} for {}/{}",
                p.record, files.owner, files.cluster
            )),
            Some(u) if !u.complete => Some(format!(
                "the upload of binary_images record {} is not complete",
                p.record
            )),
            Some(u) => {
                p.sha256 = u.sha256.clone();
                p.url = files
                    .base_url
                    .map(|b| file_url(b, files.owner, files.cluster, &p.record));
                None
            }
        };
        if let Some(problem) = &problem {
            plan.missing.push(format!("{}: {problem}", p.name));
        }
        p.problem = problem;
    }
    if files.base_url.is_none() && !plan.packages.is_empty() {
        plan.missing.push(
            "the agent has no --advertise-url, so nodes cannot be told where to download packages"
                .into(),
        );
    }
    if plan.spec_errors.is_empty() && plan.missing.is_empty() {
        let packages: Vec<_> = plan
            .packages
            .iter()
            .map(|p| {
                let mut m = json!({"name": p.name, "version": p.version, "groups": p.groups,
                                   "url": p.url, "sha256": p.sha256});
                // Only when set: a manifest without drains stays what it was (its digest names the Job).
                if p.drain {
                    m["drain"] = json!(true);
                }
                m
            })
            .collect();
        let manifest =
            json!({"owner": files.owner, "cluster": files.cluster, "packages": packages});
        plan.manifest =
            Some(serde_json::to_string_pretty(&manifest).expect("JSON values serialize") + "\n");
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    fn spec(masters: Value, workers: Value) -> SoftwareSpec {
        serde_json::from_value(json!({"masterSoftware": masters, "workerSoftware": workers}))
            .unwrap()
    }

    fn up(name: &str, complete: bool) -> Uploaded {
        Uploaded {
            name: name.into(),
            complete,
            sha256: complete.then(|| format!("{:0>64}", name.len())),
        }
    }

    const FILES: Files<'static> = Files {
        base_url: Some("http://10.0.0.1:5000/"),
        owner: "tenant a",
        cluster: "c1",
    };

    #[test]
    fn resolves_names_and_versions_to_records_and_urls() {
        let p = plan(
            &spec(
                json!(["curl", {"kubectl": {"version": "1.33.4"}}]),
                json!(["curl", {"htop": {}}]),
            ),
            &[
                up("curl", true),
                up("kubectl-1.33.4", true),
                up("htop", true),
                up("kubectl", true),
            ],
            &FILES,
        );
        assert!(p.spec_errors.is_empty() && p.missing.is_empty(), "{p:?}");
        let got: Vec<_> = p
            .packages
            .iter()
            .map(|p| {
                (
                    p.record.as_str(),
                    p.groups.join(","),
                    p.url.clone().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "curl",
                    "kube_control_plane,kube_node".to_owned(),
                    "http://10.0.0.1:5000/files/tenant%20a/c1/binary_images/curl".to_owned()
                ),
                (
                    "kubectl-1.33.4",
                    "kube_control_plane".to_owned(),
                    "http://10.0.0.1:5000/files/tenant%20a/c1/binary_images/kubectl-1.33.4"
                        .to_owned()
                ),
                (
                    "htop",
                    "kube_node".to_owned(),
                    "http://10.0.0.1:5000/files/tenant%20a/c1/binary_images/htop".to_owned()
                ),
            ]
        );
        let manifest: Value = serde_json::from_str(p.manifest.as_deref().unwrap()).unwrap();
        assert_eq!(manifest["owner"], "tenant a");
        assert_eq!(manifest["packages"][1]["version"], "1.33.4");
        assert_eq!(manifest["packages"][1]["sha256"], format!("{:0>64}", 14));
    }

    #[test]
    fn missing_and_unfinished_uploads_are_named_and_hold_the_manifest_back() {
        let p = plan(
            &spec(json!(["a", {"b": {"version": "2"}}]), json!([])),
            &[up("a", false), up("b", true)],
            &FILES,
        );
        assert_eq!(
            p.missing,
            [
                "a: the upload of binary_images record a is not complete",
                "b: no binary_images record b-2 for tenant a/c1"
            ]
        );
        assert_eq!(
            p.packages[1].problem.as_deref(),
            Some("no binary_images record b-2 for tenant a/c1")
        );
        assert!(p.manifest.is_none() && p.spec_errors.is_empty());
    }

    #[test]
    fn spec_errors_name_the_field_and_package() {
        let p = plan(
            &spec(
                json!([{"x": {"version": 3}}, "y", {"y": {"version": "1"}}, 7]),
                json!(["../etc", {"a": {}, "b": {}}]),
            ),
            &[],
            &FILES,
        );
        assert_eq!(p.spec_errors.len(), 5, "{:?}", p.spec_errors);
        assert!(p.spec_errors[0].starts_with("masterSoftware: package x: version must be a string"));
        assert_eq!(
            p.spec_errors[1],
            "masterSoftware: package y is listed twice (unversioned and 1)"
        );
        assert!(p.spec_errors[2].starts_with("masterSoftware: a package is a name or"));
        assert!(p.spec_errors[3].starts_with("workerSoftware: package ../etc: "));
        assert!(p.spec_errors[4].starts_with("workerSoftware: a package is a name or"));
        assert!(p.manifest.is_none());
    }

    #[test]
    fn a_drain_asked_in_either_list_goes_into_the_manifest_and_a_misspelt_one_is_refused() {
        let p = plan(
            &spec(
                json!([{"rt": {"version": "2", "drain": true}}, "tool"]),
                json!([{"rt": {"version": "2"}}, {"tool": null}]),
            ),
            &[up("rt-2", true), up("tool", true)],
            &FILES,
        );
        assert!(p.spec_errors.is_empty(), "{:?}", p.spec_errors);
        assert_eq!((p.packages[0].drain, p.packages[1].drain), (true, false));
        let manifest: Value = serde_json::from_str(p.manifest.as_deref().unwrap()).unwrap();
        assert_eq!(manifest["packages"][0]["drain"], true);
        // No key at all when not asked: manifests (and so Job names) without drains are what they were.
        assert!(manifest["packages"][1].get("drain").is_none());

        let p = plan(
            &spec(
                json!([{"rt": {"drian": true}}, {"x": {"drain": "yes"}}]),
                json!([]),
            ),
            &[],
            &FILES,
        );
        assert_eq!(
            p.spec_errors,
            [
                "masterSoftware: package rt: \"drian\" is not a field of a package (version, drain)",
                "masterSoftware: package x: drain must be true or false, not \"yes\""
            ]
        );
    }

    #[test]
    fn without_an_advertise_url_nothing_is_installed() {
        let files = Files {
            base_url: None,
            ..FILES
        };
        let p = plan(&spec(json!(["a"]), json!([])), &[up("a", true)], &files);
        assert_eq!(p.missing.len(), 1);
        assert!(p.missing[0].contains("--advertise-url"));
        assert!(p.manifest.is_none());
        // No packages, nothing to download: an empty Software installs nothing, successfully.
        let p = plan(&spec(json!([]), json!([])), &[], &files);
        assert!(p.missing.is_empty() && p.manifest.is_some());
    }

    proptest! {
        #[test]
        fn every_record_appears_once_with_its_groups(
            masters in proptest::collection::btree_set("[a-z]{1,3}", 0..6),
            workers in proptest::collection::btree_set("[a-z]{1,3}", 0..6),
            versioned in any::<bool>(),
            uploaded in proptest::collection::vec(("[a-z]{1,3}(-1)?", any::<bool>()), 0..12),
        ) {
            let item = |n: &String| if versioned { json!({n.clone(): {"version": "1"}}) } else { json!(n) };
            let s = spec(json!(masters.iter().map(item).collect::<Vec<_>>()),
                         json!(workers.iter().map(item).collect::<Vec<_>>()));
            let ups: Vec<Uploaded> = uploaded.iter().map(|(n, c)| up(n, *c)).collect();
            let p = plan(&s, &ups, &FILES);
            prop_assert!(p.spec_errors.is_empty());
            let all: std::collections::BTreeSet<_> = masters.union(&workers).collect();
            prop_assert_eq!(p.packages.len(), all.len());
            for pkg in &p.packages {
                let want: Vec<&str> = [(MASTER_GROUP, &masters), (WORKER_GROUP, &workers)]
                    .into_iter().filter(|(_, set)| set.contains(&pkg.name)).map(|(g, _)| g).collect();
                prop_assert_eq!(&pkg.groups, &want);
                prop_assert_eq!(&pkg.record, &if versioned { format!("{}-1", pkg.name) } else { pkg.name.clone() });
                // The first record of that name decides, as the store has one record per name.
                let ready = ups.iter().find(|u| u.name == pkg.record).is_some_and(|u| u.complete);
                prop_assert_eq!(pkg.problem.is_none(), ready);
                prop_assert_eq!(pkg.url.is_some(), ready);
            }
            prop_assert_eq!(p.manifest.is_some(), p.packages.iter().all(|p| p.problem.is_none()));
        }
    }
}
