//! The HTTP surface on one screen: every implemented path of the spec, its handlers and the
//! access it needs, as one table (`table`) from which `routes` builds the router.
//!
//! Access families: app routes (`context::require_app`: app keys or a signed request),
//! master-key routes (`context::require_master`: schemas), console routes (app management and
//! SMS templates: the `context::ConsoleAccount` extractor), link routes (pages opened from
//! emailed links and captcha pictures: the token in the path is the credential) and open
//! routes (`/health`, `/metrics`). Each family's handlers live in the file of the same name.

pub mod apps;
pub mod backups;
pub mod batch;
pub mod batch_slot;
pub mod captcha;
pub mod cloud_query;
pub mod context;
pub mod email;
pub mod error;
pub mod files;
pub mod functions;
pub mod installations;
pub mod object_writes;
pub mod objects;
pub mod ops;
pub mod push;
pub mod realtime;
pub mod roles;
pub mod schemas;
pub mod sms;
pub mod timestamp;
pub mod users;
pub mod websocket;

use axum::middleware::from_fn_with_state;
use axum::routing::{MethodFilter, MethodRouter};
use axum::Router;

use context::{require_app, require_master, require_master_or_console, require_operator, AppState};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// App keys, or a signed request (`require_app`).
    App,
    /// The app's master key (`require_master`).
    Master,
    /// A console account's email and password (`ConsoleAccount`).
    Console,
    /// The token in the path (emailed links, captcha pictures).
    Link,
    /// Anyone (health, files, realtime handshakes).
    Open,
    /// The node's operator: `--metrics-token` as a bearer token, or without one a caller on
    /// the node's own machine (`require_operator`).
    Operator,
    /// The console account (every app), or an app's master key (that app):
    /// `require_master_or_console`.
    MasterOrConsole,
}

/// One path of the table: the access its router checks (`gate`), and each method with the
/// name of its handler and the access it needs.
pub struct Route<S> {
    pub path: &'static str,
    pub gate: Access,
    pub methods: Vec<MethodAccess>,
    pub router: MethodRouter<S>,
}

/// One method of a route: its handler's name, and who may call it — the route's gate, or a
/// stricter access its handler checks itself (a function's deploy needs the master key where
/// a call needs the app's keys).
#[derive(Debug, Clone, Copy)]
pub struct MethodAccess {
    pub method: MethodFilter,
    /// The method as written (`GET`, `POST`, ...).
    pub verb: &'static str,
    pub handler: &'static str,
    pub access: Access,
}

/// A `Route`: `route!(Access, "/path", GET => module::handler, PUT(Master) => ...)`; a method
/// names its own access when its handler asks more than the route's gate. The handlers' names
/// are recorded as written.
macro_rules! route {
    ($gate:ident, $path:literal, $($method:ident $(($access:ident))? => $handler:path),+ $(,)?) => {
        Route {
            path: $path,
            gate: Access::$gate,
            methods: vec![$(MethodAccess {
                method: MethodFilter::$method,
                verb: stringify!($method),
                handler: stringify!($handler),
                access: route!(@access $gate $($access)?),
            }),+],
            router: MethodRouter::new()$(.on(MethodFilter::$method, $handler))+,
        }
    };
    (@access $gate:ident) => { Access::$gate };
    (@access $gate:ident $access:ident) => { Access::$access };
}

/// Every route. `/1/classes/_User`, `_Role` and `_Installation` are rewritten to `/1/users`,
/// `/1/roles` and `/1/installations` before routing (`paths`).
pub fn table() -> Vec<Route<AppState>> {
    vec![
        // Objects, batch and server time (spec 4.1).
        route!(App, "/1/classes/{class}", GET => objects::query_objects, POST => objects::create_object),
        route!(App, "/1/classes/{class}/{id}",
            GET => objects::get_object, PUT => objects::update_object, DELETE => objects::delete_object),
        route!(App, "/1/batch", POST => batch::run_batch),
        route!(App, "/1/timestamp", GET => timestamp::get_timestamp),
        route!(App, "/1/cloudQuery", GET => cloud_query::cloud_query),
        // Users (spec 4.5).
        route!(App, "/1/users", GET => users::query_users, POST => users::sign_up),
        route!(App, "/1/usersv1", POST => users::sign_up),
        route!(App, "/1/users/{id}",
            GET => users::get_user, PUT => users::update_user, DELETE => users::delete_user),
        route!(App, "/1/login", GET => users::log_in_by_query, POST => users::log_in_by_body),
        route!(App, "/1/updateUserPassword/{id}",
            POST => users::update_user_password, PUT => users::update_user_password),
        route!(App, "/1/updatePassword/{id}",
            PUT => users::update_user_password, POST => users::update_user_password),
        route!(App, "/1/checkSession/{id}", GET => users::check_session),
        route!(App, "/1/requestEmailVerify", POST => email::request_email_verify),
        route!(App, "/1/requestPasswordReset", POST => email::request_password_reset),
        // SMS codes and captchas (spec 4.10).
        route!(App, "/1/requestSmsCode", POST => sms::request_sms_code),
        route!(App, "/1/verifySmsCode", POST => sms::verify_sms_code_in_body),
        route!(App, "/1/verifySmsCode/{code}", POST => sms::verify_sms_code_in_path),
        route!(App, "/1/querySms/{sms_id}", GET => sms::query_sms),
        route!(App, "/1/resetPasswordBySmsCode/{code}",
            PUT => sms::reset_password_by_sms_code, POST => sms::reset_password_by_sms_code),
        route!(App, "/1/requestCaptcha", POST => captcha::request_captcha),
        route!(App, "/1/verifyCaptcha", POST => captcha::verify_captcha),
        // Files (spec 4.7); a file's url is an open route below.
        route!(App, "/2/files/{*path}", POST => files::upload, DELETE => files::delete_file),
        route!(App, "/2/cdnBatchDelete", POST => files::batch_delete),
        route!(App, "/2/cdnVedioSnapshot", POST => files::video_snapshot),
        route!(App, "/2/cdnSignedUrls", POST => files::signed_urls),
        // Installations (spec 4.12).
        route!(App, "/1/installations",
            GET => installations::query_installations, POST => installations::create_installation),
        route!(App, "/1/installations/{id}",
            GET => installations::get_installation, PUT => installations::update_installation,
            DELETE => installations::delete_installation),
        // A push needs the master key unless the app allows client push (`clientPush`).
        route!(App, "/1/push", GET(Master) => push::query_push_statuses, POST => push::send_push),
        route!(Master, "/1/push/{id}", GET => push::get_push_status),
        // Cloud functions (spec 4.11; deploy, list, show and delete need the master key, checked
        // by the handlers: a call needs only the app's keys).
        route!(App, "/1/functions", GET(Master) => functions::list_functions),
        route!(App, "/1/functions/{name}",
            POST => functions::call_function, PUT(Master) => functions::deploy_function,
            GET(Master) => functions::get_function, DELETE(Master) => functions::delete_function),
        // Realtime (decisions/0024): each transport authenticates itself (keys in the headers
        // or the query; socket.io clients may name their app in each subscription instead).
        route!(Open, "/1/realtime", GET => realtime::plain_websocket),
        route!(Open, "/1/realtime/events", GET => realtime::server_sent_events),
        route!(Open, "/socket.io/1",
            GET => realtime::socket_io_handshake, POST => realtime::socket_io_handshake),
        route!(Open, "/socket.io/1/websocket/{sid}", GET => realtime::socket_io_websocket),
        // Roles (spec 4.6).
        route!(App, "/1/roles", GET => roles::query_roles, POST => roles::create_role),
        route!(App, "/1/roles/{id}",
            GET => roles::get_role, PUT => roles::update_role, DELETE => roles::delete_role),
        // Schemas (spec 4.9).
        route!(Master, "/1/schemas", GET => schemas::list_schemas),
        route!(Master, "/1/schemas/{class}",
            GET => schemas::get_schema, POST => schemas::create_schema,
            PUT => schemas::update_schema, DELETE => schemas::delete_schema),
        route!(Master, "/1/schemas/{class}/indexes",
            GET => schemas::list_indexes, POST => schemas::create_index),
        route!(Master, "/1/schemas/{class}/indexes/{field}", DELETE => schemas::drop_index),
        // App management (spec 4.8).
        route!(Console, "/1/apps", GET => apps::list_apps_of_account, POST => apps::create_app),
        route!(Console, "/1/apps/{app_id}", GET => apps::get_app, PUT => apps::update_app_settings),
        route!(Console, "/1/apps/{app_id}/smsTemplates",
            GET => sms::list_templates, POST => sms::put_template),
        route!(Console, "/1/apps/{app_id}/smsTemplates/{name}", DELETE => sms::delete_template),
        route!(Console, "/1/apps/{app_id}/files", GET => files::usage),
        route!(Console, "/1/apps/{app_id}/usage", GET => apps::app_usage),
        // Pages opened from emailed links, and captcha pictures.
        route!(Link, "/email/verify/{token}", GET => email::follow_verify_link),
        route!(Link, "/email/reset/{token}", GET => email::show_reset_page, POST => email::reset_password),
        route!(Link, "/captcha/{name}", GET => captcha::captcha_picture),
        // Stored files' urls (`<public url>/<cdn>/YYYY/MM/DD/<id>.<ext>`); `<cdn>` is the
        // configured name (`path_with_cdn`).
        route!(Open, "/<cdn>/{year}/{month}/{day}/{name}", GET => files::download),
        // Operations (not part of the spec).
        route!(Open, "/health", GET => ops::health),
        route!(Operator, "/metrics", GET => ops::metrics),
        route!(MasterOrConsole, "/admin/logs", GET => ops::logs),
        route!(Console, "/admin/backups",
            GET => backups::list_backups, POST => backups::take_backup),
    ]
}

/// A table path as routed: `<cdn>` replaced by the storage name of files (`--files-cdn`).
pub fn path_with_cdn(path: &str, cdn: &str) -> String {
    path.replace("<cdn>", cdn)
}

/// The router of `table`: each access family behind its check; unknown paths and methods
/// answered by `ops`.
pub fn routes(state: AppState) -> Router {
    let (mut app, mut master, mut other) = (Router::new(), Router::new(), Router::new());
    let (mut operator, mut admin) = (Router::new(), Router::new());
    for r in table() {
        let path = path_with_cdn(r.path, &state.files.cdn);
        match r.gate {
            Access::App => app = app.route(&path, r.router),
            Access::Master => master = master.route(&path, r.router),
            Access::Operator => operator = operator.route(&path, r.router),
            Access::MasterOrConsole => admin = admin.route(&path, r.router),
            Access::Console | Access::Link | Access::Open => other = other.route(&path, r.router),
        }
    }
    Router::new()
        .merge(app.route_layer(from_fn_with_state(state.clone(), require_app)))
        .merge(master.route_layer(from_fn_with_state(state.clone(), require_master)))
        .merge(operator.route_layer(from_fn_with_state(state.clone(), require_operator)))
        .merge(admin.route_layer(from_fn_with_state(state.clone(), require_master_or_console)))
        .merge(other)
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    /// The table's paths and methods, each answering with its handler's name, the access of
    /// that method and (after `@`) the table path and method it was reached as.
    fn echo_router() -> Router {
        table().into_iter().fold(Router::new(), |router, r| {
            let path = r.path;
            let methods = r.methods.iter().fold(MethodRouter::new(), |m, &a| {
                let answer = format!("{} {:?} @{path} {}", a.handler, a.access, a.verb);
                m.on(a.method, move || async move { answer })
            });
            router.route(&path_with_cdn(r.path, "basalt"), methods)
        })
    }

    /// What `method url` reaches, after the path rewrite every request gets (`paths`): the
    /// handler and its access, and the table's path and method.
    async fn reach(method: &str, url: &str) -> Result<(String, String), StatusCode> {
        let req = Request::builder()
            .method(method)
            .uri(crate::paths::routed_path(url))
            .body(Body::empty())
            .unwrap();
        let resp = echo_router().oneshot(req).await.unwrap();
        if resp.status() != StatusCode::OK {
            return Err(resp.status());
        }
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let (handler, at) = text.split_once(" @").unwrap();
        Ok((handler.to_string(), at.to_string()))
    }

    #[tokio::test]
    async fn each_url_and_method_reaches_its_handler_behind_its_access() {
        let rows = [
            ("GET", "/1/classes/GameScore", "objects::query_objects App"),
            ("POST", "/1/classes/GameScore", "objects::create_object App"),
            ("GET", "/1/classes/GameScore/a1", "objects::get_object App"),
            (
                "PUT",
                "/1/classes/GameScore/a1",
                "objects::update_object App",
            ),
            (
                "DELETE",
                "/1/classes/GameScore/a1",
                "objects::delete_object App",
            ),
            ("GET", "/1/classes/GameScore/", "objects::query_objects App"),
            ("POST", "/1/batch", "batch::run_batch App"),
            ("GET", "/1/timestamp", "timestamp::get_timestamp App"),
            ("GET", "/1/cloudQuery", "cloud_query::cloud_query App"),
            ("GET", "/1/users", "users::query_users App"),
            ("GET", "/1/classes/_User", "users::query_users App"),
            ("POST", "/1/classes/_User", "users::sign_up App"),
            ("POST", "/1/usersv1", "users::sign_up App"),
            ("GET", "/1/classes/_User/u1", "users::get_user App"),
            ("PUT", "/1/users/u1", "users::update_user App"),
            ("DELETE", "/1/users/u1", "users::delete_user App"),
            ("GET", "/1/login", "users::log_in_by_query App"),
            ("POST", "/1/login", "users::log_in_by_body App"),
            (
                "PUT",
                "/1/updateUserPassword/u1",
                "users::update_user_password App",
            ),
            (
                "POST",
                "/1/updatePassword/u1",
                "users::update_user_password App",
            ),
            ("GET", "/1/checkSession/u1", "users::check_session App"),
            (
                "POST",
                "/1/requestEmailVerify",
                "email::request_email_verify App",
            ),
            (
                "POST",
                "/1/requestPasswordReset",
                "email::request_password_reset App",
            ),
            ("POST", "/1/requestSmsCode", "sms::request_sms_code App"),
            (
                "POST",
                "/1/verifySmsCode",
                "sms::verify_sms_code_in_body App",
            ),
            (
                "POST",
                "/1/verifySmsCode/123456",
                "sms::verify_sms_code_in_path App",
            ),
            ("GET", "/1/querySms/7", "sms::query_sms App"),
            (
                "PUT",
                "/1/resetPasswordBySmsCode/123456",
                "sms::reset_password_by_sms_code App",
            ),
            ("POST", "/1/requestCaptcha", "captcha::request_captcha App"),
            ("POST", "/1/verifyCaptcha", "captcha::verify_captcha App"),
            ("GET", "/1/classes/_Role", "roles::query_roles App"),
            ("POST", "/1/roles", "roles::create_role App"),
            ("PUT", "/1/classes/_Role/r1", "roles::update_role App"),
            ("DELETE", "/1/roles/r1", "roles::delete_role App"),
            ("GET", "/1/schemas", "schemas::list_schemas Master"),
            ("GET", "/1/schemas/_User", "schemas::get_schema Master"),
            (
                "DELETE",
                "/1/schemas/GameScore",
                "schemas::delete_schema Master",
            ),
            (
                "POST",
                "/1/schemas/GameScore/indexes",
                "schemas::create_index Master",
            ),
            (
                "DELETE",
                "/1/schemas/GameScore/indexes/score",
                "schemas::drop_index Master",
            ),
            ("GET", "/1/apps", "apps::list_apps_of_account Console"),
            ("PUT", "/1/apps/a1", "apps::update_app_settings Console"),
            (
                "POST",
                "/1/apps/a1/smsTemplates",
                "sms::put_template Console",
            ),
            (
                "DELETE",
                "/1/apps/a1/smsTemplates/t",
                "sms::delete_template Console",
            ),
            ("GET", "/1/apps/a1/files", "files::usage Console"),
            ("GET", "/1/apps/a1/usage", "apps::app_usage Console"),
            ("GET", "/email/verify/tok", "email::follow_verify_link Link"),
            ("POST", "/email/reset/tok", "email::reset_password Link"),
            ("GET", "/captcha/tok.png", "captcha::captcha_picture Link"),
            ("POST", "/2/files/a.png", "files::upload App"),
            (
                "DELETE",
                "/2/files/basalt/2026/01/02/x.png",
                "files::delete_file App",
            ),
            (
                "DELETE",
                "/2/files/upyun//basalt/2026/01/02/x.png",
                "files::delete_file App",
            ),
            ("POST", "/2/cdnBatchDelete", "files::batch_delete App"),
            ("POST", "/2/cdnVedioSnapshot", "files::video_snapshot App"),
            ("POST", "/2/cdnSignedUrls", "files::signed_urls App"),
            ("GET", "/basalt/2026/01/02/x.png", "files::download Open"),
            (
                "GET",
                "/1/classes/_Installation",
                "installations::query_installations App",
            ),
            (
                "POST",
                "/1/installations",
                "installations::create_installation App",
            ),
            (
                "PUT",
                "/1/classes/_Installation/i1",
                "installations::update_installation App",
            ),
            (
                "DELETE",
                "/1/installations/i1",
                "installations::delete_installation App",
            ),
            ("POST", "/1/push", "push::send_push App"),
            ("GET", "/1/push", "push::query_push_statuses Master"),
            ("GET", "/1/push/p1", "push::get_push_status Master"),
            ("GET", "/1/functions", "functions::list_functions Master"),
            ("POST", "/1/functions/add", "functions::call_function App"),
            (
                "PUT",
                "/1/functions/add",
                "functions::deploy_function Master",
            ),
            ("GET", "/1/functions/add", "functions::get_function Master"),
            (
                "DELETE",
                "/1/functions/add",
                "functions::delete_function Master",
            ),
            ("GET", "/1/realtime", "realtime::plain_websocket Open"),
            (
                "GET",
                "/1/realtime/events",
                "realtime::server_sent_events Open",
            ),
            ("GET", "/socket.io/1", "realtime::socket_io_handshake Open"),
            ("POST", "/socket.io/1", "realtime::socket_io_handshake Open"),
            (
                "GET",
                "/socket.io/1/websocket/s1",
                "realtime::socket_io_websocket Open",
            ),
            ("POST", "/1/apps", "apps::create_app Console"),
            ("GET", "/1/apps/a1", "apps::get_app Console"),
            (
                "GET",
                "/1/apps/a1/smsTemplates",
                "sms::list_templates Console",
            ),
            ("GET", "/email/reset/tok", "email::show_reset_page Link"),
            (
                "GET",
                "/1/installations/i1",
                "installations::get_installation App",
            ),
            ("GET", "/1/roles/r1", "roles::get_role App"),
            ("POST", "/1/schemas/Game", "schemas::create_schema Master"),
            ("PUT", "/1/schemas/Game", "schemas::update_schema Master"),
            (
                "GET",
                "/1/schemas/Game/indexes",
                "schemas::list_indexes Master",
            ),
            ("GET", "/1/users/u1", "users::get_user App"),
            ("POST", "/1/users", "users::sign_up App"),
            (
                "PUT",
                "/1/updatePassword/u1",
                "users::update_user_password App",
            ),
            (
                "POST",
                "/1/updateUserPassword/u1",
                "users::update_user_password App",
            ),
            (
                "POST",
                "/1/resetPasswordBySmsCode/123456",
                "sms::reset_password_by_sms_code App",
            ),
            ("PUT", "/1/roles/r1", "roles::update_role App"),
            (
                "GET",
                "/1/installations",
                "installations::query_installations App",
            ),
            (
                "PUT",
                "/1/installations/i1",
                "installations::update_installation App",
            ),
            ("GET", "/1/schemas/Game", "schemas::get_schema Master"),
            ("GET", "/health", "ops::health Open"),
            ("GET", "/admin/logs", "ops::logs MasterOrConsole"),
            ("GET", "/admin/backups", "backups::list_backups Console"),
            ("POST", "/admin/backups", "backups::take_backup Console"),
            ("GET", "/metrics", "ops::metrics Operator"),
        ];
        let mut reached = std::collections::BTreeSet::new();
        for (method, url, expected) in rows {
            let (handler, at) = reach(method, url).await.unwrap_or_default();
            assert_eq!(handler, expected, "{method} {url}");
            reached.insert(at);
        }
        // Every method of every path of the table is reached by a row, with its access.
        let table: std::collections::BTreeSet<String> = table()
            .iter()
            .flat_map(|r| r.methods.iter().map(|a| format!("{} {}", r.path, a.verb)))
            .collect();
        let missed: Vec<&String> = table.difference(&reached).collect();
        assert!(missed.is_empty(), "no row reaches {missed:?}");
        let refused = [
            ("GET", "/1/nothing", StatusCode::NOT_FOUND),
            ("GET", "/1/classes/Game/a1/extra", StatusCode::NOT_FOUND),
            ("POST", "/1/classes/Game/a1/extra", StatusCode::NOT_FOUND),
            ("GET", "/other/2026/01/02/x.png", StatusCode::NOT_FOUND),
            ("DELETE", "/1/users", StatusCode::METHOD_NOT_ALLOWED),
            ("GET", "/1/batch", StatusCode::METHOD_NOT_ALLOWED),
            ("DELETE", "/1/apps/a1", StatusCode::METHOD_NOT_ALLOWED),
        ];
        for (method, url, status) in refused {
            assert_eq!(reach(method, url).await, Err(status), "{method} {url}");
        }
    }

    #[test]
    fn the_table_names_each_path_once() {
        let table = table();
        let mut paths: Vec<&str> = table.iter().map(|r| r.path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), table.len());
        assert!(table.iter().all(|r| !r.methods.is_empty()));
        // A method's access is its route's gate or stricter: master-key methods behind the app
        // gate check the master key in their handlers.
        for r in &table {
            for a in &r.methods {
                assert!(
                    a.access == r.gate || (r.gate == Access::App && a.access == Access::Master),
                    "{} {}: {:?} behind {:?}",
                    r.path,
                    a.verb,
                    a.access,
                    r.gate
                );
            }
        }
    }
}
