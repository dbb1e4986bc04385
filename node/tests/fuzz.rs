//! Property-based fuzzing of request decoding: arbitrary bytes and adversarial JSON bodies go
//! through everything that turns a request body into a command (`json_object`,
//! `parse_updates`, schema requirements and admission, the update operators applied to a stored
//! object, the batch envelope and the schema-endpoint bodies). Nothing may panic, every refusal
//! must carry one of the documented codes, and every accepted command must survive its log
//! encoding unchanged.
//!
//! `make test` runs the default number of cases (256 per property); `make fuzz` runs
//! `PROPTEST_CASES` (default 100000) for a longer search.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use basalt::api::batch::parse_envelope;
use basalt::api::context::json_object;
use basalt::api::error::ApiError;
use basalt::api::schemas::column_changes;
use basalt_cluster::schema::infer::requirements;
use basalt_cluster::schema::ClassSchema;
use basalt_cluster::statemachine::ops::apply_updates;
use basalt_cluster::update::parse_updates;
use basalt_cluster::Command;
use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};

/// Codes a write body may be refused with (spec 7, decisions.md).
const BODY_CODES: [u32; 6] = [104, 105, 106, 107, 111, 117];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z][a-zA-Z0-9_]{0,6}",
        Just("objectId".to_string()),
        Just("createdAt".to_string()),
        Just("ACL".to_string()),
        Just("__op".to_string()),
        Just("__type".to_string()),
        "[a-c]{1,2}\\.[0-2]\\.[a-c]{1,2}",
        "[a-c]{1,2}\\.[a-c]{1,2}",
        "\\PC{0,5}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,8}".prop_map(Value::String),
        Just(json!("2024-01-02T03:04:05.000Z")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 48, 5, |inner| {
        let type_names = prop_oneof![
            Just("Date"),
            Just("Pointer"),
            Just("GeoPoint"),
            Just("File"),
            Just("Relation"),
            Just("Object"),
            Just("Bogus"),
        ];
        let ops = prop_oneof![
            Just("Increment"),
            Just("Delete"),
            Just("Add"),
            Just("AddUnique"),
            Just("Remove"),
            Just("AddRelation"),
            Just("RemoveRelation"),
            Just("Frob"),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner.clone(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            (
                type_names,
                prop::collection::btree_map(
                    prop_oneof![
                        Just("iso".to_string()),
                        Just("className".to_string()),
                        Just("objectId".to_string()),
                        Just("latitude".to_string()),
                        Just("longitude".to_string()),
                        Just("url".to_string()),
                        Just("filename".to_string()),
                    ],
                    inner.clone(),
                    0..4
                )
            )
                .prop_map(|(t, m)| {
                    let mut o: Map<String, Value> = m.into_iter().collect();
                    o.insert("__type".into(), json!(t));
                    Value::Object(o)
                }),
            (ops, inner.clone(), prop::collection::vec(inner, 0..3)).prop_map(
                |(op, amount, objects)| {
                    json!({"__op": op, "amount": amount, "objects": objects})
                }
            ),
        ]
    })
}

fn body() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(key(), value(), 0..6).prop_map(|m| m.into_iter().collect())
}

fn code_of(e: basalt_cluster::Error) -> u32 {
    ApiError::from(e).code()
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(e) = json_object(&bytes) {
            prop_assert_eq!(e.code(), 107);
        }
    }

    #[test]
    fn bodies_decode_to_commands_or_documented_codes(body in body(), stored in body()) {
        let text = Value::Object(body.clone()).to_string();
        let parsed = json_object(text.as_bytes()).expect("a JSON object parses");
        prop_assert_eq!(&parsed, &body);
        match parse_updates(&body) {
            Err(e) => {
                let code = code_of(e);
                prop_assert!(BODY_CODES.contains(&code), "code {}", code);
            }
            Ok(updates) => {
                // Accepted: survives the log encoding, and its schema checks and operators
                // answer rather than panic.
                let cmd = Command::UpdateObject {
                    app: basalt_cluster::names::AppId::new_app("a".into()),
                    class: basalt_cluster::names::ClassName::user("C").unwrap(),
                    object_id: basalt_cluster::names::ObjectId::random(),
                    now_ms: 1,
                    updates: updates.clone(),
                    principals: basalt_cluster::acl::Principals::public(),
                    unset: Vec::new(),
                    holds: Vec::new(),
                };
                let bytes = serde_json::to_vec(&cmd).unwrap();
                let back: Command = serde_json::from_slice(&bytes).unwrap();
                prop_assert_eq!(back, cmd);
                let needs = requirements(&updates);
                let schema = ClassSchema::new("C");
                let _ = schema.admit(&needs, &|c: &str| c == "C");
                let mut fields = stored.clone();
                if let Err(e) = apply_updates(&mut fields, &updates) {
                    let code = code_of(e);
                    prop_assert!(BODY_CODES.contains(&code), "apply code {}", code);
                }
            }
        }
    }

    #[test]
    fn batch_envelopes_decode_or_answer_their_codes(requests in prop::collection::vec(
        prop_oneof![
            value(),
            (prop_oneof![Just("POST"), Just("put"), Just("Delete"), Just("GET"), Just("")],
             prop_oneof![Just("/1/classes/A"), Just("/1/classes/A/x"), Just("/1/users/u"), Just("/1/apps"), Just("/1/classes/A?x")],
             value())
                .prop_map(|(m, p, b)| json!({"method": m, "path": p, "body": b})),
        ],
        0..60,
    )) {
        let body = json!({ "requests": requests });
        if let Err(e) = parse_envelope(body.as_object().unwrap()) {
            prop_assert!([112, 113, 114].contains(&e.code()), "code {}", e.code());
        }
    }

    #[test]
    fn schema_bodies_decode_or_answer_their_codes(body in body()) {
        if let Err(e) = column_changes("C", &body, true) {
            prop_assert!(
                [103, 105, 107, 10062, 10069].contains(&e.code()),
                "code {}", e.code()
            );
        }
    }
}
