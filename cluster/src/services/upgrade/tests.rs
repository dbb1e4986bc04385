use super::*;
use crate::ids::NodeId;

fn member(id: u64, version: &str, features: &[&str]) -> NodeRecord {
    NodeRecord {
        id: NodeId::new(id),
        rpc_addr: String::new(),
        http_addr: String::new(),
        state: NodeState::Active,
        plaintext: false,
        features: features.iter().map(|f| f.to_string()).collect(),
        version: version.to_string(),
        disk: None,
        draining_since_ms: None,
    }
}

fn record(version: &str, features: &[&str], hold: bool) -> VersionRecord {
    VersionRecord {
        version: version.to_string(),
        features: features.iter().map(|f| f.to_string()).collect(),
        finalized_at_ms: Some(1),
        hold,
    }
}

#[test]
fn versions_order_numerically() {
    assert!(version_key("0.10.0") > version_key("0.9.3"));
    assert!(version_key("1.0.0") > version_key("0.99.99"));
    assert_eq!(version_key("0.2.1-rc1"), (0, 2, 1));
    assert!(version_key("") < version_key("0.0.1"));
}

#[test]
fn a_mixed_cluster_turns_on_only_what_every_member_has() {
    let members = [
        member(1, "0.2.0", &["a", "b"]),
        member(2, "0.1.0", &["a"]),
        member(3, "0.2.0", &["a", "b"]),
    ];
    let a = assess(&members);
    assert_eq!(a.common, BTreeSet::from(["a".to_string()]));
    assert_eq!(a.lowest, "0.1.0");
    assert_eq!(a.nodes[1].lacks, vec!["b".to_string()]);
    let next = a.finalized(None);
    assert_eq!(next.version, "0.1.0");
    assert_eq!(next.features, BTreeSet::from(["a".to_string()]));
    let status = status_of(Some(&next), &members);
    assert!(!status.finalized, "node 2 still runs the old build");
    assert!(status.pending.is_empty());
}

#[test]
fn finalizing_keeps_what_was_on_and_takes_the_lowest_version() {
    // A node went back to 0.1.0, which has every feature that is on: the cluster can be
    // finalized again at 0.1.0.
    let members = [member(1, "0.1.0", &["a"]), member(2, "0.2.0", &["a"])];
    let before = record("0.2.0", &["a", "z"], true);
    assert!(!status_of(Some(&before), &members).finalized);
    let next = assess(&members).finalized(Some(&before));
    assert_eq!(next.version, "0.1.0");
    assert!(next.features.contains("z"), "a feature once on stays on");
    assert!(!next.hold, "finalizing ends a hold");
    let same = [member(1, "0.1.0", &["a"]), member(2, "0.1.0", &["a"])];
    assert!(status_of(Some(&next), &same).finalized);
}

#[test]
fn a_held_upgrade_is_pending_until_finalized() {
    let members = [
        member(1, "0.2.0", &["a", "b"]),
        member(2, "0.2.0", &["a", "b"]),
    ];
    let held = record("0.1.0", &["a"], true);
    let status = status_of(Some(&held), &members);
    assert!(!status.finalized);
    assert!(status.hold);
    assert_eq!(status.cluster_version, "0.1.0");
    assert_eq!(status.pending, vec!["b".to_string()]);
    assert_eq!(status.features, vec!["a".to_string()]);
    let done = assess(&members).finalized(Some(&held));
    let status = status_of(Some(&done), &members);
    assert!(status.finalized);
    assert_eq!(status.cluster_version, "0.2.0");
    assert!(status.pending.is_empty());
}

#[test]
fn removed_members_do_not_hold_an_upgrade_back() {
    let mut gone = member(3, "0.1.0", &[]);
    gone.state = NodeState::Removed;
    let members = [member(1, "0.2.0", &["a"]), member(2, "0.2.0", &["a"]), gone];
    let a = assess(&members);
    assert_eq!(a.lowest, "0.2.0");
    assert_eq!(a.common, BTreeSet::from(["a".to_string()]));
    assert_eq!(a.nodes.len(), 2);
}

#[test]
fn a_build_without_a_finalized_feature_is_refused_by_name() {
    let on = vec!["a".to_string(), "b".to_string()];
    assert!(refuse_build(&on, &on, "node 2").is_none());
    let Some(Error::InvalidOperation(msg)) = refuse_build(&on, &["a".to_string()], "node 2") else {
        panic!("a build without b must be refused");
    };
    assert!(msg.contains("node 2") && msg.contains("\"b\""), "{msg}");
}

#[test]
fn without_a_record_the_features_every_member_has_are_on() {
    let members = [member(1, "0.1.0", &["a", "b"]), member(2, "0.1.0", &["a"])];
    let status = status_of(None, &members);
    assert_eq!(status.features, vec!["a".to_string()]);
    assert!(!status.finalized, "node 2 lacks b");
    let same = [member(1, "0.1.0", &["a"]), member(2, "0.1.0", &["a"])];
    assert!(status_of(None, &same).finalized);
}
