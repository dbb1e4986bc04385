//! The HTTP surface on one screen: every implemented path of the spec, its handler and the
//! authentication it needs.
//!
//! Three families by authentication: app routes (`context::require_app`: app keys or a signed
//! request), master-key routes (`context::require_master`: schemas), and console routes (app
//! management and SMS templates, `context::ConsoleAccount`). `/health` and `/metrics` need none. Each family's
//! handlers live in the file of the same name.

pub mod apps;
pub mod batch;
pub mod captcha;
pub mod cloud_query;
pub mod context;
pub mod email;
pub mod error;
pub mod objects;
pub mod ops;
pub mod roles;
pub mod schemas;
pub mod sms;
pub mod timestamp;
pub mod users;

use axum::middleware::from_fn_with_state;
use axum::routing::{get, post, put};
use axum::Router;

use context::{require_app, require_master, AppState};

pub fn routes(state: AppState) -> Router {
    // Objects, batch and server time (spec 4.1): app keys or a signed request.
    let app_routes = Router::new()
        .route(
            "/1/classes/{class}",
            get(objects::query_objects).post(objects::create_object),
        )
        .route(
            "/1/classes/{class}/{id}",
            get(objects::get_object)
                .put(objects::update_object)
                .delete(objects::delete_object),
        )
        // Users (spec 4.5); `/1/classes/_User` is rewritten to `/1/users` before routing.
        .route("/1/users", get(users::query_users).post(users::sign_up))
        .route("/1/usersv1", post(users::sign_up))
        .route(
            "/1/users/{id}",
            get(users::get_user)
                .put(users::update_user)
                .delete(users::delete_user),
        )
        .route(
            "/1/login",
            get(users::log_in_by_query).post(users::log_in_by_body),
        )
        .route(
            "/1/updateUserPassword/{id}",
            post(users::update_user_password).put(users::update_user_password),
        )
        .route(
            "/1/updatePassword/{id}",
            put(users::update_user_password).post(users::update_user_password),
        )
        .route("/1/checkSession/{id}", get(users::check_session))
        .route("/1/requestEmailVerify", post(email::request_email_verify))
        .route(
            "/1/requestPasswordReset",
            post(email::request_password_reset),
        )
        // SMS codes and captchas (spec 4.10).
        .route("/1/requestSmsCode", post(sms::request_sms_code))
        .route("/1/verifySmsCode", post(sms::verify_sms_code_in_body))
        .route(
            "/1/verifySmsCode/{code}",
            post(sms::verify_sms_code_in_path),
        )
        .route("/1/querySms/{sms_id}", get(sms::query_sms))
        .route(
            "/1/resetPasswordBySmsCode/{code}",
            put(sms::reset_password_by_sms_code).post(sms::reset_password_by_sms_code),
        )
        .route("/1/requestCaptcha", post(captcha::request_captcha))
        .route("/1/verifyCaptcha", post(captcha::verify_captcha))
        // Roles (spec 4.6); `/1/classes/_Role` is rewritten to `/1/roles`.
        .route("/1/roles", get(roles::query_roles).post(roles::create_role))
        .route(
            "/1/roles/{id}",
            get(roles::get_role)
                .put(roles::update_role)
                .delete(roles::delete_role),
        )
        .route("/1/batch", post(batch::run_batch))
        .route("/1/timestamp", get(timestamp::get_timestamp))
        .route("/1/cloudQuery", get(cloud_query::cloud_query))
        .route_layer(from_fn_with_state(state.clone(), require_app));
    // Schemas (spec 4.9): the master key.
    let master_routes = Router::new()
        .route("/1/schemas", get(schemas::list_schemas))
        .route(
            "/1/schemas/{class}",
            get(schemas::get_schema)
                .post(schemas::create_schema)
                .put(schemas::update_schema)
                .delete(schemas::delete_schema),
        )
        .route(
            "/1/schemas/{class}/indexes",
            get(schemas::list_indexes).post(schemas::create_index),
        )
        .route_layer(from_fn_with_state(state.clone(), require_master));
    // App management (spec 4.8): the console account's email and password.
    let console_routes = Router::new()
        .route(
            "/1/apps",
            get(apps::list_apps_of_account).post(apps::create_app),
        )
        .route(
            "/1/apps/{app_id}",
            get(apps::get_app).put(apps::update_app_settings),
        )
        .route(
            "/1/apps/{app_id}/smsTemplates",
            get(sms::list_templates).post(sms::put_template),
        )
        .route(
            "/1/apps/{app_id}/smsTemplates/{name}",
            axum::routing::delete(sms::delete_template),
        );
    Router::new()
        .merge(app_routes)
        .merge(master_routes)
        .merge(console_routes)
        // Pages opened from emailed links: the token is the credential.
        .route("/email/verify/{token}", get(email::follow_verify_link))
        .route(
            "/email/reset/{token}",
            get(email::show_reset_page).post(email::reset_password),
        )
        // Captcha pictures: the token is the credential.
        .route("/captcha/{name}", get(captcha::captcha_picture))
        // Operations: health and Prometheus metrics (not part of the spec).
        .route("/health", get(ops::health))
        .route("/metrics", get(ops::metrics))
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .with_state(state)
}
