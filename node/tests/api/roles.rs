//! Roles (spec 2.5, 5.5; `src/api/roles.rs`): the roles endpoints, and what a role grants —
//! its users and the users of its child roles read and write what the role may, at once
//! through every node.

use reqwest::Method;
use serde_json::{json, Value};

use super::common::scenario::{run_rows, After, As, Row};
use super::common::{assert_api_error, register_user, TestCluster};

/// Three users and two roles of the boss's (readable by all): `helpers` holding the helper,
/// and `admins` (made through the `_Role` alias) holding `helpers` as its child role.
struct Crew {
    client: basalt_client::Client,
    boss_t: String,
    helper: String,
    helper_t: String,
    stranger_t: String,
    helpers: basalt_client::Response,
    admins_id: String,
}

fn user_ptr(id: &str) -> Value {
    json!({"__type": "Pointer", "className": "_User", "objectId": id})
}

async fn crew(cluster: &TestCluster) -> Crew {
    let client = cluster.spread_client();
    let (boss, boss_t) = register_user(&client, "boss").await;
    let (helper, helper_t) = register_user(&client, "helper").await;
    let (_, stranger_t) = register_user(&client, "stranger").await;
    let as_boss = client.clone().with_session(Some(&boss_t));
    let owner_acl = json!({boss.clone(): {"read": true, "write": true}, "*": {"read": true}});
    let body = json!({"name": "helpers", "ACL": owner_acl, "users": {"__op": "AddRelation", "objects": [user_ptr(&helper)]}});
    let helpers = as_boss
        .request(Method::POST, "/1/roles", Some(&body), false)
        .await;
    let helpers = helpers.expect("create role");
    let child =
        json!({"__type": "Pointer", "className": "_Role", "objectId": helpers.body["objectId"]});
    let body = json!({"name": "admins", "ACL": owner_acl, "roles": {"__op": "AddRelation", "objects": [child]}});
    let admins = as_boss
        .request(Method::POST, "/1/classes/_Role", Some(&body), false)
        .await;
    let admins_id = admins.expect("create parent role through the alias").body["objectId"]
        .as_str()
        .unwrap()
        .to_string();
    Crew {
        client,
        boss_t,
        helper,
        helper_t,
        stranger_t,
        helpers,
        admins_id,
    }
}

/// A role is made with 201 and its Location, and shows its name but not its relations
/// (refusals: `roles_endpoints_answer_every_case`); deleting a role frees its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_shows_its_name_not_its_relations_and_its_delete_frees_the_name() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let Crew {
        client,
        boss_t,
        helpers,
        admins_id,
        ..
    } = crew(&cluster).await;
    assert_eq!(helpers.status, 201);
    let location = helpers.location.as_deref().unwrap_or_default();
    assert!(location.contains("/1/roles/"), "{location}");
    let helpers_id = helpers.body["objectId"].as_str().unwrap();
    let path = format!("/1/roles/{helpers_id}");
    let shown = client
        .request(Method::GET, &path, None, false)
        .await
        .unwrap()
        .body;
    assert_eq!(shown["name"], "helpers");
    assert!(
        shown.get("users").is_none() && shown.get("roles").is_none(),
        "{shown}"
    );
    let as_boss = client.clone().with_session(Some(&boss_t));
    let path = format!("/1/roles/{admins_id}");
    as_boss
        .request(Method::DELETE, &path, None, false)
        .await
        .expect("delete role");
    let again = as_boss
        .request(
            Method::POST,
            "/1/roles",
            Some(&json!({"name": "admins"})),
            false,
        )
        .await;
    again.expect("the name is free again");
}

/// What a role grants, as a table: an object readable and writable by `admins` is the
/// helper's through its child role `helpers`, not the stranger's, nor the boss's (who owns
/// the roles without being in them); listings count the same; a member removed loses it at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_grants_its_members_and_its_child_roles_members() {
    let cluster = TestCluster::start(3, &["--shards", "4"], &[]).await;
    let Crew {
        client,
        boss_t,
        helper,
        helper_t,
        stranger_t,
        helpers,
        ..
    } = crew(&cluster).await;
    let as_boss = client.clone().with_session(Some(&boss_t));
    let vault = json!({"v": 1, "ACL": {"role:admins": {"read": true, "write": true}}});
    let secret = as_boss
        .create_object("Vault", &vault)
        .await
        .unwrap()
        .object_id;
    let path = format!("/1/classes/Vault/{secret}");
    let v_is = |v: i64| After::Field {
        class: "Vault",
        id: secret.clone(),
        field: "v",
        value: json!(v),
    };
    let (helper_as, stranger_as) = (
        As::Session(helper_t.clone()),
        As::Session(stranger_t.clone()),
    );
    let read =
        |name: &'static str, who: &As| Row::new(name, Method::GET, path.clone()).auth(who.clone());
    let rows = vec![
        read("the helper reads through its child role", &helper_as).succeeds(200),
        read("a stranger", &stranger_as).fails(404, 101),
        read(
            "the boss, who owns the role without being in it",
            &As::Session(boss_t.clone()),
        )
        .fails(404, 101),
        Row::new(
            "the helper writes through its child role",
            Method::PUT,
            path.clone(),
        )
        .auth(helper_as.clone())
        .body(r#"{"v": 2}"#)
        .succeeds(200)
        .after(v_is(2)),
        Row::new("a stranger writes", Method::PUT, path.clone())
            .auth(stranger_as)
            .body(r#"{"v": 3}"#)
            .fails(404, 101)
            .after(v_is(2)),
    ];
    run_rows(&cluster, &rows).await;
    let count = |t: &str| {
        let c = client.clone().with_session(Some(t));
        async move { c.query("Vault", &[("count", "1")]).await.unwrap()["count"].clone() }
    };
    assert_eq!(
        (count(&helper_t).await, count(&stranger_t).await),
        (json!(1), json!(0))
    );
    let helpers_path = format!("/1/roles/{}", helpers.body["objectId"].as_str().unwrap());
    let remove = json!({"users": {"__op": "RemoveRelation", "objects": [user_ptr(&helper)]}});
    as_boss
        .request(Method::PUT, &helpers_path, Some(&remove), false)
        .await
        .expect("remove member");
    run_rows(
        &cluster,
        &[read("the helper, removed", &helper_as).fails(404, 101)],
    )
    .await;
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
