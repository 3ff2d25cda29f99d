//! libmodsecurity v3's C API, loaded at run time with `dlopen`.
//!
//! Why not link: the `hapctl` binary (and its Debian package) must run on hosts without
//! libmodsecurity, and only `hapctl waf serve` needs it. Why not the `modsecurity` crate:
//! 1.0 requires libmodsecurity ≥ 3.0.13 (Debian 12 ships 3.0.9) and 0.1 exposes no request
//! processing at all (docs/waf.md). The C API used here is stable across 3.0.x.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The soname Debian's `libmodsecurity3` installs.
pub const LIBRARY: &str = "libmodsecurity.so.3";

pub type LogCb = unsafe extern "C" fn(*mut c_void, *const c_void);

/// The functions hapctl calls, resolved once per process.
#[allow(clippy::type_complexity)]
pub struct Api {
    pub init: unsafe extern "C" fn() -> *mut c_void,
    pub who_am_i: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    pub set_connector_info: unsafe extern "C" fn(*mut c_void, *const c_char),
    pub set_log_cb: unsafe extern "C" fn(*mut c_void, Option<LogCb>),
    pub cleanup: unsafe extern "C" fn(*mut c_void),
    pub create_rules_set: unsafe extern "C" fn() -> *mut c_void,
    pub rules_add: unsafe extern "C" fn(*mut c_void, *const c_char, *mut *const c_char) -> c_int,
    pub rules_cleanup: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub new_transaction_with_id:
        unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_char, *mut c_void) -> *mut c_void,
    pub process_connection:
        unsafe extern "C" fn(*mut c_void, *const c_char, c_int, *const c_char, c_int) -> c_int,
    pub process_uri:
        unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char, *const c_char) -> c_int,
    pub add_n_request_header:
        unsafe extern "C" fn(*mut c_void, *const u8, usize, *const u8, usize) -> c_int,
    pub process_request_headers: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub append_request_body: unsafe extern "C" fn(*mut c_void, *const u8, usize) -> c_int,
    pub process_request_body: unsafe extern "C" fn(*mut c_void) -> c_int,
    pub transaction_cleanup: unsafe extern "C" fn(*mut c_void),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    #[error("{LIBRARY} could not be loaded ({0}); install Debian's libmodsecurity3")]
    Library(String),
    #[error("{LIBRARY} has no symbol `{0}`; it is not libmodsecurity v3")]
    Symbol(&'static str),
}

/// The loaded library; the handle is never closed (the process needs it to its end).
pub fn api() -> Result<&'static Api, LoadError> {
    static API: OnceLock<Result<Api, LoadError>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Api, LoadError> {
    let name = CString::new(LIBRARY).expect("no NUL in the soname");
    // SAFETY: dlopen with a valid C string; the handle is leaked on purpose.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(LoadError::Library(dl_error()));
    }
    macro_rules! sym {
        ($name:literal) => {{
            let c = concat!($name, "\0");
            // SAFETY: a NUL-terminated symbol name on a live handle.
            let p = unsafe { libc::dlsym(handle, c.as_ptr().cast()) };
            if p.is_null() {
                return Err(LoadError::Symbol($name));
            }
            // SAFETY: the symbol has the C signature of the field it fills
            // (modsecurity/modsecurity.h, transaction.h, rules_set.h of 3.0.x).
            unsafe { fn_pointer(p) }
        }};
    }
    Ok(Api {
        init: sym!("msc_init"),
        who_am_i: sym!("msc_who_am_i"),
        set_connector_info: sym!("msc_set_connector_info"),
        set_log_cb: sym!("msc_set_log_cb"),
        cleanup: sym!("msc_cleanup"),
        create_rules_set: sym!("msc_create_rules_set"),
        rules_add: sym!("msc_rules_add"),
        rules_cleanup: sym!("msc_rules_cleanup"),
        new_transaction_with_id: sym!("msc_new_transaction_with_id"),
        process_connection: sym!("msc_process_connection"),
        process_uri: sym!("msc_process_uri"),
        add_n_request_header: sym!("msc_add_n_request_header"),
        process_request_headers: sym!("msc_process_request_headers"),
        append_request_body: sym!("msc_append_request_body"),
        process_request_body: sym!("msc_process_request_body"),
        transaction_cleanup: sym!("msc_transaction_cleanup"),
    })
}

/// A symbol's address as the function pointer type `F`.
///
/// # Safety
/// `p` is a function whose C signature is `F`'s.
unsafe fn fn_pointer<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: same size (checked), and the caller vouches for the signature.
    unsafe { std::mem::transmute_copy(&p) }
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local C string or NULL.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown dlopen error".into();
    }
    // SAFETY: non-NULL, NUL-terminated.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// Takes a string libmodsecurity allocated with malloc (a rules parser error).
///
/// # Safety
/// `p` is NULL or a malloc'd NUL-terminated string nobody else frees.
pub unsafe fn take_c_string(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract above.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    // SAFETY: malloc'd by the library, freed once here.
    unsafe { libc::free(p.cast()) };
    Some(s)
}
