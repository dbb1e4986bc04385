//! Roles (spec 2.5, 5.5; `src/api/roles.rs`): the roles endpoints, and what a role grants —
//! its users and the users of its child roles read and write what the role may, at once
//! through every node.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::scenario::{run_rows, After, As, Row};
use super::common::{assert_api_error, register_user, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_grant_their_members_and_child_roles_access() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let client = cluster.spread_client();
    let register = |name: &'static str| register_user(&client, name);
    let (boss, boss_t) = register("boss").await;
    let (helper, helper_t) = register("helper").await;
    let (_, stranger_t) = register("stranger").await;
    let as_boss = client.clone().with_session(Some(&boss_t));
    let as_helper = client.clone().with_session(Some(&helper_t));
    let as_stranger = client.clone().with_session(Some(&stranger_t));
    let user_ptr = |id: &str| json!({"__type": "Pointer", "className": "_User", "objectId": id});
    let role_ptr = |id: &str| json!({"__type": "Pointer", "className": "_Role", "objectId": id});

    // Roles: 201 + Location; relations hidden (refusals: `roles_endpoints_answer_every_case`).
    let owner_acl = json!({boss.clone(): {"read": true, "write": true}, "*": {"read": true}});
    let helpers = as_boss
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({
                "name": "helpers", "ACL": owner_acl,
                "users": {"__op": "AddRelation", "objects": [user_ptr(&helper)]},
            })),
            false,
        )
        .await
        .expect("create role");
    assert_eq!(helpers.status, 201);
    assert!(helpers
        .location
        .as_deref()
        .is_some_and(|l| l.contains("/1/roles/")));
    let helpers_id = helpers.body["objectId"].as_str().unwrap().to_string();
    let admins = as_boss
        .request(
            Method::POST,
            "/1/classes/_Role",
            Some(&json!({
                "name": "admins", "ACL": owner_acl,
                "roles": {"__op": "AddRelation", "objects": [role_ptr(&helpers_id)]},
            })),
            false,
        )
        .await
        .expect("create parent role through the alias");
    let admins_id = admins.body["objectId"].as_str().unwrap().to_string();
    let post_role = |body: Value| {
        let c = as_boss.clone();
        async move {
            c.request(Method::POST, "/1/roles", Some(&body), false)
                .await
        }
    };
    let shown = client
        .request(Method::GET, &format!("/1/roles/{helpers_id}"), None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(shown["name"], "helpers");
    assert!(
        shown.get("users").is_none() && shown.get("roles").is_none(),
        "{shown}"
    );

    // An object readable by admins: helpers inherit it (child role of admins).
    let secret = as_boss
        .create_object(
            "Vault",
            &json!({"v": 1, "ACL": {"role:admins": {"read": true, "write": true}}}),
        )
        .await
        .unwrap()
        .object_id;
    assert!(
        as_helper
            .get_object("Vault", &secret)
            .await
            .unwrap()
            .is_some(),
        "inherited role"
    );
    assert!(as_stranger
        .get_object("Vault", &secret)
        .await
        .unwrap()
        .is_none());
    assert!(
        as_boss
            .get_object("Vault", &secret)
            .await
            .unwrap()
            .is_none(),
        "boss owns the role, is not in it"
    );
    as_helper
        .update_object("Vault", &secret, &json!({"v": 2}))
        .await
        .expect("role write");
    assert_eq!(
        as_helper.query("Vault", &[("count", "1")]).await.unwrap()["count"],
        1
    );
    assert_eq!(
        as_stranger.query("Vault", &[("count", "1")]).await.unwrap()["count"],
        0
    );

    // Membership changes take effect at once.
    let helpers_path = format!("/1/roles/{helpers_id}");
    as_boss
        .request(
            Method::PUT,
            &helpers_path,
            Some(&json!({"users": {"__op": "RemoveRelation", "objects": [user_ptr(&helper)]}})),
            false,
        )
        .await
        .expect("remove member");
    assert!(
        as_helper
            .get_object("Vault", &secret)
            .await
            .unwrap()
            .is_none(),
        "membership removed"
    );

    // Deleting a role frees its name.
    let admins_path = format!("/1/roles/{admins_id}");
    as_boss
        .request(Method::DELETE, &admins_path, None, false)
        .await
        .expect("delete role");
    post_role(json!({"name": "admins"}))
        .await
        .expect("the name is free again");
}

/// The role endpoints, case by case: what each answers with the right and wrong keys, a bad
/// body, a bad name, and an ACL that denies; each refusal leaves the roles as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_endpoints_answer_every_case() {
    let cluster = TestCluster::start(1, &["--shards", "4"], &[]).await;
    let client = cluster.client(0);
    let (boss, boss_t) = register_user(&client, "boss").await;
    let (helper, _) = register_user(&client, "helper").await;
    let (_, stranger_t) = register_user(&client, "stranger").await;
    let helpers = client
        .clone()
        .with_session(Some(&boss_t))
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({
                "name": "helpers",
                "ACL": {boss.clone(): {"read": true, "write": true}, "*": {"read": true}},
                "users": {"__op": "AddRelation", "objects": [
                    {"__type": "Pointer", "className": "_User", "objectId": helper}]},
            })),
            false,
        )
        .await
        .expect("create role")
        .body["objectId"]
        .as_str()
        .expect("id")
        .to_string();
    let roles = |n: u64| After::Count("_Role", n);
    let helpers_name = |name: &str| After::Field {
        class: "_Role",
        id: helpers.clone(),
        field: "name",
        value: json!(name),
    };
    let path = format!("/1/roles/{helpers}");
    let boss_s = As::Session(boss_t.clone());
    let stranger = As::Session(stranger_t.clone());
    let remove_helper = json!({"users": {"__op": "RemoveRelation", "objects": [
        {"__type": "Pointer", "className": "_User", "objectId": helper}]}})
    .to_string();
    let rows = [
        // POST /1/roles
        Row::new("create a role", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body(r#"{"name":"editors"}"#)
            .succeeds(201)
            .after(roles(2)),
        Row::new("create without keys", Method::POST, "/1/roles")
            .auth(As::Nobody)
            .body(r#"{"name":"x1"}"#)
            .unauthorized()
            .after(roles(2)),
        Row::new("create with a wrong key", Method::POST, "/1/roles")
            .auth(As::WrongKey)
            .body(r#"{"name":"x1"}"#)
            .unauthorized()
            .after(roles(2)),
        Row::new("create with malformed JSON", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body("{bad")
            .fails(400, 107)
            .after(roles(2)),
        Row::new("create with an array", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body("[1]")
            .fails(400, 107),
        Row::new("create without a name", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body(r#"{"ACL":{"*":{"read":true}}}"#)
            .fails(400, 139)
            .after(roles(2)),
        Row::new("create with a bad name", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body(r#"{"name":"bad/name"}"#)
            .fails(400, 139)
            .after(roles(2)),
        Row::new("create with a taken name", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body(r#"{"name":"helpers"}"#)
            .fails(400, 139)
            .after(roles(2)),
        Row::new("create with users that are roles", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body(
                json!({"name": "x2", "users": {"__op": "AddRelation", "objects": [
                    {"__type": "Pointer", "className": "_Role", "objectId": helpers}]}})
                .to_string(),
            )
            .fails(400, 111)
            .after(roles(2)),
        Row::new("create with a malformed ACL", Method::POST, "/1/roles")
            .auth(boss_s.clone())
            .body(r#"{"name":"x3","ACL":[1]}"#)
            .fails(400, 107)
            .after(roles(2)),
        // GET /1/roles/<id>
        Row::new("get a role", Method::GET, path.clone()),
        Row::new("get without keys", Method::GET, path.clone())
            .auth(As::Nobody)
            .unauthorized(),
        Row::new("get an unknown role", Method::GET, "/1/roles/nosuchrole").fails(404, 101),
        Row::new("get an impossible id", Method::GET, "/1/roles/a.b").fails(404, 101),
        // PUT /1/roles/<id>
        Row::new(
            "change members without write access",
            Method::PUT,
            path.clone(),
        )
        .auth(stranger.clone())
        .body(remove_helper.clone())
        .fails(404, 101),
        Row::new("rename a role", Method::PUT, path.clone())
            .auth(boss_s.clone())
            .body(r#"{"name":"renamed"}"#)
            .fails(400, 139)
            .after(helpers_name("helpers")),
        Row::new("update with malformed JSON", Method::PUT, path.clone())
            .auth(boss_s.clone())
            .body("{bad")
            .fails(400, 107)
            .after(helpers_name("helpers")),
        Row::new("update an unknown role", Method::PUT, "/1/roles/nosuchrole")
            .auth(boss_s.clone())
            .body(r#"{"note":"x"}"#)
            .fails(404, 101),
        Row::new("change members", Method::PUT, path.clone())
            .auth(boss_s.clone())
            .body(remove_helper)
            .succeeds(200),
        // DELETE /1/roles/<id>
        Row::new("delete without a session", Method::DELETE, path.clone())
            .fails(400, 206)
            .after(roles(2)),
        Row::new("delete without write access", Method::DELETE, path.clone())
            .auth(stranger)
            .fails(404, 101)
            .after(roles(2)),
        Row::new("delete without keys", Method::DELETE, path.clone())
            .auth(As::Nobody)
            .unauthorized()
            .after(roles(2)),
        Row::new("delete a role", Method::DELETE, path.clone())
            .auth(boss_s)
            .succeeds(200)
            .after(roles(1)),
        Row::new("get a deleted role", Method::GET, path).fails(404, 101),
    ];
    run_rows(&cluster, &rows).await;
}

/// Story — through every node.
///
/// A role change takes effect for the very next request through any node: members added and
/// removed through one node are seen at once through the others (the role graph is read from
/// each node's own replica of the metadata group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_changes_take_effect_at_once_through_every_node() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let node = |i: usize| cluster.client(i);
    let (_, owner_t) = register_user(&node(0), "owner").await;
    let (bob, bob_t) = register_user(&node(1), "bob").await;
    let as_owner = |i: usize| node(i).with_session(Some(&owner_t));
    let as_bob = |i: usize| node(i).with_session(Some(&bob_t));

    let role = as_owner(0)
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({"name": "editors"})),
            false,
        )
        .await
        .expect("create the role")
        .body["objectId"]
        .as_str()
        .expect("role id")
        .to_string();
    let doc = as_owner(1)
        .create_object(
            "Draft",
            &json!({"text": "secret", "ACL": {"role:editors": {"read": true, "write": true}}}),
        )
        .await
        .expect("create the draft")
        .object_id;
    let members = |op: &str| {
        json!({"users": {"__op": op, "objects": [
            {"__type": "Pointer", "className": "_User", "objectId": bob}]}})
    };
    let role_path = format!("/1/roles/{role}");
    for round in 0..6 {
        let via = round % 3;
        // Granted through one node: readable and writable through every node at once.
        as_owner(via)
            .request(
                Method::PUT,
                &role_path,
                Some(&members("AddRelation")),
                false,
            )
            .await
            .expect("add bob");
        for i in 0..3 {
            let seen = as_bob(i).get_object("Draft", &doc).await.expect("read");
            assert!(
                seen.is_some(),
                "round {round}: node {i} does not see the grant"
            );
            as_bob(i)
                .increment("Draft", &doc, "edits", 1)
                .await
                .unwrap_or_else(|e| panic!("round {round}: node {i} refused a member: {e}"));
        }
        // Revoked through another node: gone through every node at once.
        as_owner((via + 1) % 3)
            .request(
                Method::PUT,
                &role_path,
                Some(&members("RemoveRelation")),
                false,
            )
            .await
            .expect("remove bob");
        for i in 0..3 {
            let seen = as_bob(i).get_object("Draft", &doc).await.expect("read");
            assert!(
                seen.is_none(),
                "round {round}: node {i} still grants a removed member"
            );
            assert_api_error(
                as_bob(i).increment("Draft", &doc, "edits", 1).await,
                404,
                101,
                "a removed member writes",
            );
        }
    }
    let draft = cluster
        .master_client(2)
        .request(Method::GET, &format!("/1/classes/Draft/{doc}"), None, true)
        .await
        .expect("read with the master key")
        .body;
    assert_eq!(draft["edits"], 18, "every granted write counted once");
}
