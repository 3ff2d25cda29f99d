//! The `wordpress` profile: the old manager's WordPress gates (PEER-API §2.7) and its two POST
//! limits (§2.6), same behaviour, as typed rules.

use super::{Acl, Action, Rule, Rules, Table};

/// POSTs to wp-login.php per client per `WINDOW_SECS` before the tarpit (old: 30 / 60 s).
pub const LOGIN_POST_LIMIT: u32 = 30;
/// POSTs to xmlrpc.php per client per `WINDOW_SECS` before the tarpit (old: 60 / 60 s).
pub const XMLRPC_POST_LIMIT: u32 = 60;
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

const fn deny(status: u16) -> Action {
    Action::Deny {
        status,
        tarpit: false,
    }
}

pub(super) fn rules() -> Rules {
    Rules {
        acls: vec![
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
        ],
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
        rules: vec![
            rule(
                "login-track",
                Action::Track {
                    counter: 1,
                    table: LOGIN_TABLE,
                },
                "METH_POST wp_login",
            ),
            rule(
                "login-rate",
                Action::Deny {
                    status: 429,
                    tarpit: true,
                },
                // LOGIN_POST_LIMIT (a unit test keeps the two equal).
                "METH_POST wp_login { sc_http_req_rate(1) gt 30 }",
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
                "xmlrpc-rate",
                Action::Deny {
                    status: 429,
                    tarpit: true,
                },
                "METH_POST wp_xmlrpc { sc_http_req_rate(2) gt 60 }",
            ),
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
            rule("login-cookie", deny(403), "METH_POST wp_login !wp_login_cookie"),
            rule("batch", deny(403), "wp_batch !wp_logged_in"),
            rule(
                "admin-encoded",
                deny(403),
                "!wp_gate_off !wp_logged_in wp_admin_any wp_encoded_sep",
            ),
            rule(
                "admin-unsafe",
                deny(403),
                "!wp_gate_off !wp_logged_in wp_admin_path !wp_admin_safe_path",
            ),
            rule(
                "admin-gate",
                Action::Redirect {
                    code: 302,
                    location: "%[path,regsub(/wp-admin/.*,/wp-login.php,i)]?redirect_to=%[path,url_enc]",
                },
                "!wp_gate_off !wp_logged_in wp_admin_path !wp_admin_allow !wp_admin_asset",
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FLAG_WP_GATE_OFF;

    #[test]
    fn the_conditions_use_the_typed_constants() {
        let r = rules();
        let cond = |name| r.rules.iter().find(|x| x.name == name).unwrap().cond;
        assert!(cond("login-rate").contains(&format!("gt {LOGIN_POST_LIMIT} ")));
        assert!(cond("xmlrpc-rate").contains(&format!("gt {XMLRPC_POST_LIMIT} ")));
        let off = r.acls.iter().find(|a| a.name == "wp_gate_off").unwrap();
        assert!(off.criterion.contains(&format!(":{FLAG_WP_GATE_OFF}:")));
        assert!(r.acls.iter().any(|a| a.criterion.contains(COOKIE)));
    }
}
