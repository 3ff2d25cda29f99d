//! The `wordpress` profile: the old manager's WordPress gates (PEER-API §2.7) and its two POST
//! limits (§2.6), same behaviour, as typed rules.
//!
//! The two POST limits are per-domain thresholds (`PostLimit`, default the old 30 and 60) in
//! the profiles map value, so changing one needs no reload. Their window is the period of the
//! counting tables (`stick-table ... http_req_rate(60s)`), part of the configuration: it stays
//! fixed, since changing it would reload and empty the tables.

use super::{Acl, Action, Page, Rule, Rules, Table};
use crate::model::{FIELD_WP_LOGIN_POSTS, FIELD_WP_XMLRPC_POSTS};

/// The window of both POST limits, seconds (a table definition: a change reloads).
pub const WINDOW_SECS: u32 = 60;
pub const LOGIN_TABLE: &str = "st_wp_login";
pub const XMLRPC_TABLE: &str = "st_wp_xmlrpc";

/// The login-form cookie: set on `GET wp-login.php`, required on its POST.
pub const COOKIE: &str = "whplc";

const fn acl(name: &'static str, criterion: &'static str) -> Acl {
    Acl { name, criterion }
}

const fn rule(name: &'static str, action: Action, cond: &'static str) -> Rule {
    Rule { name, action, cond }
}

/// A rule's 403, answered with the denied page.
const fn deny() -> Action {
    Action::Deny {
        status: 403,
        tarpit: false,
        page: Page::Denied,
    }
}

/// A POST limit's tarpit: 429 with the limited page, retry once the window has passed.
const fn tarpit() -> Action {
    Action::Deny {
        status: 429,
        tarpit: true,
        page: Page::Limited {
            retry_after: WINDOW_SECS,
        },
    }
}

pub(super) fn rules() -> Rules {
    let mut rules = post_limit_rules();
    rules.extend(gate_rules());
    Rules {
        acls: acls(),
        tables: vec![
            Table {
                name: LOGIN_TABLE,
                window_secs: WINDOW_SECS,
            },
            Table {
                name: XMLRPC_TABLE,
                window_secs: WINDOW_SECS,
            },
        ],
        rules,
    }
}

fn acls() -> Vec<Acl> {
    vec![
        acl("wp_login", "path_end /wp-login.php"),
        acl("wp_xmlrpc", "path_end /xmlrpc.php"),
        acl("wp_login_cookie", "req.cook(whplc) -m found"),
        acl("wp_logged_in", "req.hdr(cookie) -m sub wordpress_logged_in_"),
        acl("wp_gate_off", "var(txn.profiles) -m sub :wp-gate-off:"),
        // wp2shell virtual patch: the REST batch endpoint, by path or by rest_route.
        acl("wp_batch", "path_beg /wp-json/batch/v1"),
        acl("wp_batch", "urlp(rest_route) -m beg /batch/v1"),
        acl("wp_batch", "query -m sub -i rest_route=%2Fbatch%2Fv1"),
        acl("wp_admin_path", "path_reg -i (^|/)wp-admin/"),
        acl("wp_admin_any", "path_sub -i wp-admin"),
        acl("wp_encoded_sep", "path_sub -i %2f %5c"),
        // Single quotes: HAProxy passes the backslash to the regex as is.
        acl("wp_admin_safe_path", r"path_reg '^/[^/\\]'"),
        acl(
            "wp_admin_allow",
            "path_end /wp-admin/admin-ajax.php /wp-admin/admin-post.php /wp-admin/load-styles.php /wp-admin/load-scripts.php",
        ),
        acl(
            "wp_admin_asset",
            r"path_reg -- (^|/)wp-admin/(css|js|images)/(?!.*\.php).*$",
        ),
    ]
}

/// The two POST limits: each POST counted in its table, tarpitted above the domain's
/// threshold.
fn post_limit_rules() -> Vec<Rule> {
    vec![
        rule(
            "login-track",
            Action::Track {
                counter: 1,
                table: LOGIN_TABLE,
            },
            "METH_POST wp_login",
        ),
        rule(
            "login-limit",
            Action::Threshold {
                var: "wp_login_t",
                field: FIELD_WP_LOGIN_POSTS,
            },
            "METH_POST wp_login",
        ),
        rule(
            "login-rate",
            tarpit(),
            "METH_POST wp_login { sc_http_req_rate(1),sub(txn.wp_login_t) -m int gt 0 }",
        ),
        rule(
            "xmlrpc-track",
            Action::Track {
                counter: 2,
                table: XMLRPC_TABLE,
            },
            "METH_POST wp_xmlrpc",
        ),
        rule(
            "xmlrpc-limit",
            Action::Threshold {
                var: "wp_xmlrpc_t",
                field: FIELD_WP_XMLRPC_POSTS,
            },
            "METH_POST wp_xmlrpc",
        ),
        rule(
            "xmlrpc-rate",
            tarpit(),
            "METH_POST wp_xmlrpc { sc_http_req_rate(2),sub(txn.wp_xmlrpc_t) -m int gt 0 }",
        ),
    ]
}

/// The login-form cookie, the REST batch patch and the wp-admin gate.
fn gate_rules() -> Vec<Rule> {
    vec![
        rule(
            "login-form",
            Action::Flag("wp_login_form"),
            "METH_GET wp_login",
        ),
        rule(
            "login-form-cookie",
            Action::ResponseHeader {
                flag: "wp_login_form",
                name: "Set-Cookie",
                value: "whplc=1; Path=/; Max-Age=1800; HttpOnly; Secure; SameSite=Lax",
            },
            "",
        ),
        rule(
            "login-cookie",
            deny(),
            "METH_POST wp_login !wp_login_cookie",
        ),
        rule("batch", deny(), "wp_batch !wp_logged_in"),
        rule(
            "admin-encoded",
            deny(),
            "!wp_gate_off !wp_logged_in wp_admin_any wp_encoded_sep",
        ),
        rule(
            "admin-unsafe",
            deny(),
            "!wp_gate_off !wp_logged_in wp_admin_path !wp_admin_safe_path",
        ),
        rule(
            "admin-gate",
            Action::Redirect {
                code: 302,
                location:
                    "%[path,regsub(/wp-admin/.*,/wp-login.php,i)]?redirect_to=%[path,url_enc]",
            },
            "!wp_gate_off !wp_logged_in wp_admin_path !wp_admin_allow !wp_admin_asset",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DomainProtections, PostLimit, FLAG_WP_GATE_OFF};

    #[test]
    fn the_rules_read_the_typed_map_value() {
        let r = rules();
        let find = |name| r.rules.iter().find(|x| x.name == name).unwrap();
        // The thresholds come from the fields map_value writes them to.
        let p = DomainProtections {
            wp_login_posts: PostLimit::new("t", 7).unwrap(),
            wp_xmlrpc_posts: PostLimit::new("t", 9).unwrap(),
            ..Default::default()
        };
        let fields: Vec<String> = p.map_value().split(':').map(String::from).collect();
        for (rule, var, want) in [
            ("login-limit", "wp_login_t", "7"),
            ("xmlrpc-limit", "wp_xmlrpc_t", "9"),
        ] {
            let Action::Threshold { var: v, field } = find(rule).action else {
                panic!("{rule} sets a threshold");
            };
            assert_eq!((v, fields[field - 1].as_str()), (var, want));
        }
        assert!(find("login-rate").cond.contains("sub(txn.wp_login_t)"));
        assert!(find("xmlrpc-rate").cond.contains("sub(txn.wp_xmlrpc_t)"));
        let off = r.acls.iter().find(|a| a.name == "wp_gate_off").unwrap();
        assert!(off.criterion.contains(&format!(":{FLAG_WP_GATE_OFF}:")));
        assert!(r.acls.iter().any(|a| a.criterion.contains(COOKIE)));
    }
}
