//! The OpenAPI schemas of the Kubernetes types Foothold's CRDs embed (`Condition`, `LabelSelector`), as
//! k8s-openapi's `schemars` feature writes them: fields name these with `#[schemars(with = "…")]`, so the CRDs
//! are the same while k8s-openapi is built without that feature, which made it about three times slower to
//! compile (a JSON schema for every type of every API group; `tests/kube/crds.rs` checks the CRDs are unchanged).

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

/// `io.k8s.apimachinery.pkg.apis.meta.v1.Condition`.
pub struct Condition;

impl JsonSchema for Condition {
    fn schema_name() -> Cow<'static, str> {
        "io.k8s.apimachinery.pkg.apis.meta.v1.Condition".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "type": "object",
            "properties": {
                "lastTransitionTime": {
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another. This should be when the underlying condition changed.  If that is not known, then using the time when the API field changed is acceptable.",
                    "type": "string",
                    "format": "date-time",
                },
                "message": {
                    "description": "message is a human readable message indicating details about the transition. This may be an empty string.",
                    "type": "string",
                },
                "observedGeneration": {
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon. For instance, if .metadata.generation is currently 12, but the .status.conditions[x].observedGeneration is 9, the condition is out of date with respect to the current state of the instance.",
                    "type": "integer",
                    "format": "int64",
                },
                "reason": {
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition. Producers of specific condition types may define expected values and meanings for this field, and whether the values are considered a guaranteed API. The value should be a CamelCase string. This field may not be empty.",
                    "type": "string",
                },
                "status": {
                    "description": "status of the condition, one of True, False, Unknown.",
                    "type": "string",
                },
                "type": {
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                },
            },
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
        })
    }
}

/// `io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector`, its requirements inline.
pub struct LabelSelector;

impl JsonSchema for LabelSelector {
    fn schema_name() -> Cow<'static, str> {
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A label selector is a label query over a set of resources. The result of matchLabels and matchExpressions are ANDed. An empty label selector matches all objects. A null label selector matches no objects.",
            "type": "object",
            "properties": {
                "matchExpressions": {
                    "description": "matchExpressions is a list of label selector requirements. The requirements are ANDed.",
                    "type": "array",
                    "items": {
                        "description": "A label selector requirement is a selector that contains values, a key, and an operator that relates the key and values.",
                        "type": "object",
                        "properties": {
                            "key": {
                                "description": "key is the label key that the selector applies to.",
                                "type": "string",
                            },
                            "operator": {
                                "description": "operator represents a key's relationship to a set of values. Valid operators are In, NotIn, Exists and DoesNotExist.",
                                "type": "string",
                            },
                            "values": {
                                "description": "values is an array of string values. If the operator is In or NotIn, the values array must be non-empty. If the operator is Exists or DoesNotExist, the values array must be empty. This array is replaced during a strategic merge patch.",
                                "type": "array",
                                "items": {"type": "string"},
                            },
                        },
                        "required": ["key", "operator"],
                    },
                },
                "matchLabels": {
                    "description": "matchLabels is a map of {key,value} pairs. A single {key,value} in the matchLabels map is equivalent to an element of matchExpressions, whose key field is \"key\", the operator is \"In\", and the values array contains only \"value\". The requirements are ANDed.",
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                },
            },
        })
    }
}
