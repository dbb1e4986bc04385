//! The binary encoding of what this crate stores in Raft logs and sends between nodes: a
//! version byte, then the value. Version 2 (written now) is MessagePack with field and variant
//! names (decisions/0027); version 1 is the JSON that logs held before it, still read so that
//! a node upgraded in place replays its old log. Node-to-node payloads had no version byte
//! when they were JSON, so a payload that starts with anything else than a known version byte
//! is read as plain JSON.
//!
//! Neighbours: `raft::log_store` (entries and Raft metadata) and `rpc::convert` (the payloads
//! of the gRPC envelopes, Raft messages on the replication stream among them).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// Version byte of values encoded as JSON (the log format before version 2).
pub const JSON_V1: u8 = 1;
/// Version byte of values encoded as MessagePack with named fields.
pub const MSGPACK_V2: u8 = 2;

/// Encodes `value` in the current format (version byte 2, then MessagePack).
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    out.push(MSGPACK_V2);
    rmp_serde::encode::write_named(&mut out, value)
        .map_err(|e| Error::Internal(format!("encoding: {e}")))?;
    Ok(out)
}

/// Decodes what `encode` wrote, a version-1 (JSON) value, or a payload without version byte
/// (plain JSON, as nodes sent before version 2).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    let decoded = match bytes.split_first() {
        Some((&MSGPACK_V2, rest)) => rmp_serde::from_slice(rest).map_err(|e| e.to_string()),
        Some((&JSON_V1, rest)) => serde_json::from_slice(rest).map_err(|e| e.to_string()),
        _ => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
    };
    decoded.map_err(|e| Error::Internal(format!("bad encoding: {e}")))
}

/// Encodes `value` as version 1 (JSON), as logs were written before version 2. Kept for the
/// tests that prove old logs stay readable.
#[cfg(test)]
pub fn encode_json_v1<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    let mut out = vec![JSON_V1];
    serde_json::to_writer(&mut out, value)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::acl::Principals;
    use crate::command::{Command, CommandResult, QuotaWindow};
    use crate::update::parse_updates;

    fn commands() -> Vec<Command> {
        let body = json!({
            "name": "Ann", "score": 12, "ratio": 0.5, "big": 9007199254740993u64,
            "neg": -3, "tiny": 1e-300, "nested": {"a": [1, "two", null, true, {"b": {}}]},
            "when": {"__type": "Date", "iso": "2026-11-26 10:00:00"},
            "text": "é \" \\ \u{1F600}", "empty": "", "list": []
        });
        let updates = parse_updates(body.as_object().unwrap()).unwrap();
        let create = Command::CreateObject {
            app: "app".into(),
            class: "GameScore".into(),
            object_id: "a1b2c3d4e5".into(),
            now_ms: 1_795_000_000_000,
            updates: updates.clone(),
        };
        vec![
            create.clone(),
            Command::UpdateObject {
                app: "app".into(),
                class: "C".into(),
                object_id: "x".into(),
                now_ms: -1,
                updates,
                principals: Principals::acting(vec!["*".into(), "role:admin".into()]),
                unset: vec!["a".into()],
                holds: vec![("t".into(), json!({"k": [1.25]}))],
            },
            Command::DeleteObject {
                app: "app".into(),
                class: "C".into(),
                object_id: "x".into(),
                principals: Principals::master(),
            },
            Command::PutRecord {
                ns: "n".into(),
                key: "k".into(),
                value: json!(null),
                expires_at_ms: Some(5),
            },
            Command::CasRecord {
                ns: "n".into(),
                key: "k".into(),
                expected: None,
                value: Some(json!({"u": 1})),
                now_ms: 3,
            },
            Command::TakeQuota {
                ns: "q".into(),
                key: "k".into(),
                now_ms: 9,
                windows: vec![QuotaWindow {
                    length_ms: 60_000,
                    max: 5,
                }],
            },
            Command::Batch(vec![create.clone(), create]),
        ]
    }

    /// The bytes this build writes for the messages whose identity fields are to become typed
    /// (app, class, objectId, principals): pinned, so that a change of their Rust types that
    /// changed a byte of the Raft log or the wire fails here.
    #[test]
    fn identity_fields_keep_the_bytes_earlier_builds_wrote() {
        use crate::command::ReadRequest;
        use crate::query::filter::Filter;
        use crate::query::ScanRequest;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let scan = ScanRequest {
            app: "app".into(),
            class: "C".into(),
            filter: Filter::All,
            order: ScanRequest::parse_order("-n"),
            skip: 1,
            limit: 2,
            principals: Principals::public(),
            count: true,
            keys: vec!["n".into()],
        };
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "delete as a user",
                encode(&Command::DeleteObject {
                    app: "app".into(),
                    class: "C".into(),
                    object_id: "x1".into(),
                    principals: Principals::acting(vec!["*".into(), "u1".into()]),
                })
                .unwrap(),
                "0281ac44656c6574654f626a65637484a3617070a3617070a5636c617373a143a96f626a6563745f6964a27831aa7072696e636970616c7392a12aa27531",
            ),
            (
                "delete as the master",
                encode(&Command::DeleteObject {
                    app: "app".into(),
                    class: "C".into(),
                    object_id: "x1".into(),
                    principals: Principals::master(),
                })
                .unwrap(),
                "0281ac44656c6574654f626a65637483a3617070a3617070a5636c617373a143a96f626a6563745f6964a27831",
            ),
            (
                "read as anyone",
                encode(&ReadRequest::GetObject {
                    app: "app".into(),
                    class: "C".into(),
                    object_id: "x1".into(),
                    principals: Principals::public(),
                })
                .unwrap(),
                "0281a94765744f626a65637484a3617070a3617070a5636c617373a143a96f626a6563745f6964a27831aa7072696e636970616c7391a12a",
            ),
            (
                "scan",
                encode(&ReadRequest::ScanObjects(scan)).unwrap(),
                "0281ab5363616e4f626a6563747389a3617070a3617070a5636c617373a143a666696c746572a3416c6ca56f726465729182a56669656c64a16eaa64657363656e64696e67c3a4736b697001a56c696d697402aa7072696e636970616c7391a12aa5636f756e74c3a46b65797391a16e",
            ),
        ];
        let mut wrong = Vec::new();
        for (what, bytes, want) in &cases {
            if hex(bytes) != *want {
                wrong.push(format!("{what}: {}", hex(bytes)));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// The typed names written where the pinned cases above do not reach (an aggregation, a
    /// create's answer, a schema command) encode as the strings they replaced: each next to
    /// a copy of its type with `String` fields, in both formats, and decode back.
    #[test]
    fn typed_names_encode_as_the_strings_they_replaced() {
        use crate::command::{CommandResult, ReadRequest};
        use crate::names::ClassName;
        use crate::query::aggregate::{AggregateRequest, AggregateSpec};
        use crate::query::filter::Filter;
        use serde::Serialize;

        #[derive(Serialize)]
        struct Aggregate {
            app: String,
            class: String,
            filter: Filter,
            spec: AggregateSpec,
        }
        #[derive(Serialize)]
        enum Read {
            Aggregate(Aggregate),
        }
        #[derive(Serialize)]
        enum Answer {
            Created { object_id: String, created_ms: i64 },
        }
        #[derive(Serialize)]
        enum Schema {
            DropClass { app: String, class: String },
        }

        let spec = AggregateSpec {
            group_by: vec!["g".into()],
            ..AggregateSpec::default()
        };
        let typed = ReadRequest::Aggregate(AggregateRequest {
            app: "app".into(),
            class: ClassName::service("_PushStatus"),
            filter: Filter::All,
            spec: spec.clone(),
            principals: Principals::master(),
        });
        let plain = Read::Aggregate(Aggregate {
            app: "app".into(),
            class: "_PushStatus".into(),
            filter: Filter::All,
            spec,
        });
        assert_eq!(encode(&typed).unwrap(), encode(&plain).unwrap());
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        assert_eq!(
            decode::<ReadRequest>(&encode(&plain).unwrap()).unwrap(),
            typed
        );

        let typed = CommandResult::Created {
            object_id: "x1".into(),
            created_ms: 7,
        };
        let plain = Answer::Created {
            object_id: "x1".into(),
            created_ms: 7,
        };
        assert_eq!(encode(&typed).unwrap(), encode(&plain).unwrap());
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );

        let typed = Command::DropClass {
            app: "app".into(),
            class: "Game".into(),
        };
        let plain = Schema::DropClass {
            app: "app".into(),
            class: "Game".into(),
        };
        assert_eq!(encode(&typed).unwrap(), encode(&plain).unwrap());
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&plain).unwrap()
        );
        assert_eq!(decode::<Command>(&encode(&plain).unwrap()).unwrap(), typed);
    }

    #[test]
    fn commands_round_trip_in_the_binary_format_and_are_smaller_than_json() {
        for cmd in commands() {
            let bytes = encode(&cmd).unwrap();
            assert_eq!(bytes[0], MSGPACK_V2);
            let back: Command = decode(&bytes).unwrap();
            assert_eq!(back, cmd);
            let json = serde_json::to_vec(&cmd).unwrap();
            assert!(
                bytes.len() < json.len(),
                "{} vs {} for {cmd:?}",
                bytes.len(),
                json.len()
            );
        }
    }

    #[test]
    fn old_json_values_stay_readable_with_and_without_a_version_byte() {
        for cmd in commands() {
            let v1 = encode_json_v1(&cmd).unwrap();
            assert_eq!(decode::<Command>(&v1).unwrap(), cmd);
            let plain = serde_json::to_vec(&cmd).unwrap();
            assert_eq!(decode::<Command>(&plain).unwrap(), cmd);
        }
        let result = CommandResult::Rejected(Error::Conflict("taken".into()));
        let plain = serde_json::to_vec(&result).unwrap();
        assert_eq!(decode::<CommandResult>(&plain).unwrap(), result);
        assert_eq!(
            decode::<CommandResult>(&encode(&result).unwrap()).unwrap(),
            result
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            &b""[..],
            &[2],
            &[2, 0xc1],
            &[1, b'{'],
            &[0xff, 0xfe],
            &[2, 0xdf, 0xff],
        ] {
            assert!(decode::<Command>(bytes).is_err(), "{bytes:?}");
        }
    }

    /// `make bench-encoding`: nanoseconds to encode and decode a log entry carrying one
    /// ~200-byte create (the bench-peers `GameScore`) and one 50-create batch, in each format.
    #[test]
    #[ignore = "a benchmark: make bench-encoding"]
    fn encoding_speed() {
        use std::time::Instant;

        use openraft::entry::RaftEntry;

        use crate::raft::{Entry, LogId};

        let create = |i: u64| {
            let body = json!({
                "score": 1337 + i, "playerName": "Sean Plott", "cheatMode": false,
                "level": 7, "tags": ["a", "b"], "ratio": 0.75,
                "address": {"city": "Shenzhen", "street": "Keyuan Road 1"}
            });
            Command::CreateObject {
                app: "7f3c1a0e9b2d".into(),
                class: "GameScore".into(),
                object_id: format!("{i:010x}").as_str().into(),
                now_ms: 1_795_000_000_000,
                updates: parse_updates(body.as_object().unwrap()).unwrap(),
            }
        };
        let leader = openraft::impls::leader_id_adv::LeaderId {
            term: 3u64,
            node_id: crate::ids::NodeId::new(1),
        };
        let one = <Entry as RaftEntry>::new_normal(LogId::new(leader, 7), create(1));
        let batch = <Entry as RaftEntry>::new_normal(
            LogId::new(leader, 8),
            Command::Batch((0..50).map(create).collect()),
        );
        println!("| entry | format | bytes | encode ns | decode ns |");
        println!("|---|---|---|---|---|");
        for (name, entry, rounds) in [
            ("one create", &one, 200_000u32),
            ("50 creates", &batch, 4_000),
        ] {
            type Enc = fn(&Entry) -> Vec<u8>;
            let formats: [(&str, Enc); 2] = [
                ("JSON (v1)", |e| encode_json_v1(e).unwrap()),
                ("MessagePack (v2)", |e| encode(e).unwrap()),
            ];
            for (format, enc) in formats {
                let bytes = enc(entry);
                let started = Instant::now();
                for _ in 0..rounds {
                    std::hint::black_box(enc(std::hint::black_box(entry)));
                }
                let enc_ns = started.elapsed().as_nanos() / u128::from(rounds);
                let started = Instant::now();
                for _ in 0..rounds {
                    let e: Entry = decode(std::hint::black_box(&bytes)).unwrap();
                    std::hint::black_box(e);
                }
                let dec_ns = started.elapsed().as_nanos() / u128::from(rounds);
                let started = Instant::now();
                for _ in 0..rounds {
                    std::hint::black_box(std::hint::black_box(entry).clone());
                }
                let clone_ns = started.elapsed().as_nanos() / u128::from(rounds);
                println!(
                    "| {name} | {format} | {} | {enc_ns} | {dec_ns} |",
                    bytes.len()
                );
                if format.starts_with("Message") {
                    println!("| {name} | clone from the log cache | - | - | {clone_ns} |");
                }
            }
        }
    }
}
