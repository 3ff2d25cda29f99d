//! Fixed keys that exist only to be refused or accepted (made once with OpenSSL), and RSA
//! keys faked to a size.

use x509_parser::asn1_rs::{Integer, Sequence, ToDer};
use x509_parser::num_bigint::BigUint;

use hapctl::tls::pem::encode;

/// Encrypted by `openssl pkcs8 -topk8 -v2 aes256` (password `hapctl-test`).
pub(super) const ENCRYPTED_PKCS8: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----
MIHsMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAj0PyUBz7t0AAICCAAw
DAYIKoZIhvcNAgkFADAdBglghkgBZQMEASoEEDSLYFA/gimKKcb6NcRGLfEEgZCH
k0s2gx8pRqYH+y7niA2UlUtTaqRL+ABT6aIJrSdvNyvprQjWMiOES4lhElEl68AW
2R9JUX93+iCYTIcZlG68JAMjYJhOsywpwVZx/izs3U2C2XDT812PPd7LrYZPRFbL
6hDHfgqtjxwxIPPAEOR/5zE6EC8fVM/M14LCu4rY3CApfRz26p2jqHeDDSBreEs=
-----END ENCRYPTED PRIVATE KEY-----
";

/// `openssl genrsa -traditional -aes128` (password `hapctl-test`): the legacy header form.
pub(super) const LEGACY_ENCRYPTED_RSA: &str = "-----BEGIN RSA PRIVATE KEY-----
Proc-Type: 4,ENCRYPTED
DEK-Info: AES-128-CBC,C4185FF00E55E4DC365FF11758FB71DD

um3hYRxP57nLGxZT38ZuDh06Uo/SVQNKiNyiJFyfNPKfYVHhI0Z9j+dktMhlzuFq
u/qwlY2RYAhM3+wq5nscC2cM5p/7riRhbGuS9haJMUN+lt6eKv4N8usJi+yKwizJ
NSbbazZpVPMg4h2lHqQwaJIMLXMdjHvOZ/hPqKuAZGgI6Me4vpGKCS8L1tbqTB82
W70yuzsf+tVnCftFAVxPqdNq3WgLUZqeS9lhNO2xA3qav/0+MFlE7iwePuMINGNV
jJVO9ABxZ840xRfWBmP1TB25Fz/E+V49M42C72Q+PEEVHjAsO+1XDOVhXAjbSdty
dyriCI/9zxT6oPsJlaBPUACMNqtRKl/jCxyc7X0gBTnomFnGAg4gVDN59Wy3D5Zg
Of81pfw+14sM6PoGFjdhY3erXXWqqmJkEAd5tysJDkz3qMW1PIEQTUn/yp7Xmjmm
Z7qyIw496Fo2c8eAyk/8h/YHCac8fhK5LCCQ6NNCRDIJwZHLibzelbiaKmjCdhBH
2XByE8K4Fz45WNBvoYtj6aq1BbFgCz3jOXsyV41WYOOvntEIyKXs7FdKD4ck41QB
Uc+u07eloIysheO7Q3m6aPG3lwKDVfFbVghFjiObT9loR0tgRWCBflkEuW9aKp2n
yl7uMg/+SAiM4ksgJRfwYtXcQR5yiq3WnOP51uLNHc/MA8GCK0vy9OgOt4up3Qoe
CnV0YnzMxjmBf6KAcWERhNywmLM2NtV1NWy34FIiQWV90yoTkQgr9lVhyicOUnYF
9MBtWme26Hvm7FgDWORPyhxCSH6NFlznwhIdJIAjOW53fsa5/RCG/tejmf9vO+Ce
-----END RSA PRIVATE KEY-----
";

/// `openssl genrsa -traditional 1024`.
pub(super) const RSA_1024: &str = "-----BEGIN RSA PRIVATE KEY-----
MIICXQIBAAKBgQDKRsrXu/Mxu4P5wgPpV/vgscEhNjZSyvgQMTzdigszXthAXgnP
Fl/Rlp2GmY+uCFcAa8OAKnyBVx0XykpGp/mCj7SNv+qT9Xi0BFbAlN8o23mZK8xj
a6ub90YlV9rau+bFb1GvkRnDpkmTI/1SLPgfFhRBGy6GDTm+SXa8sUs9gQIDAQAB
AoGAJLwijndlvTxuxWcEytXdunrNtjhgOTz/PAGVKi6txhCNeXMamO9ZS3js9srg
mxyMoFjx0k7k+aBWekGUp6xN1aOGcbDdsvg6PTkQ1BpMirzP47wwUK5V4vDvvqgP
WN2wg6PK8DEqa7jdWvXf2W1BxUO8SgYK5kA8kUX+i0kaoFkCQQDtEHCwQjrirK/V
sg0pD5n6b11fC8pGQoU+OnqBTlF13QHxIvZKqCXvLoVblWRNL+eFASWGr2yx6UZs
aDrwlQfTAkEA2m8A0C0a3vovuzmanlfRGP4tQg+wiK8NMrqLT2Lq/PbDnYe6bzYw
bAQhB0flVTIHssRu2xGysP0RH94VhvDE2wJBAOl3DWOodhGSe8B6j1dm0/+8+TmH
hPdYv5wfP1Jk7PikZSszgVbY7jL1n8QoBhW2Hc3w6SIRVXyI/h/5LkKMop0CQD5j
AdpzZ39T+ZoBw9WBw2jd/9MkZAlF5gEdInjUCcWiPRCbGXZ2BbJ0I3LO6ANDPMuk
Kv1KuryuKtvtNDzMO40CQQCrivkWj72x1FpqV3Sqh8hCpRBhzF5Cwx22MU+Yukh1
MdV4iq0JhHJjgGDdRDtq4te3Mxqp5Hn0VcPDvOd425Xs
-----END RSA PRIVATE KEY-----
";

/// `openssl genrsa -traditional 2048`: a PKCS#1 key to accept.
pub(super) const RSA_2048_PKCS1: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEoAIBAAKCAQEArHzgKd+SttxtED8/u8H6nRg/1ZgG1dvSFQTkx9jB8/eyXaFl
jN4AyaLpSkjILsLGUznhN4rA/cNrrQbsJo3eYGiM3OzOFGmylpaZkyybU0DHi8l4
bny1HMql7unNNRQTPVN4/AES1qnmVAvQ3st7wDgq36CgprYwcFoQsKjDObJYmJlw
SsDGRvIOzLHrmYXolRhnDX9fxkX5nQ3RH+UnM0U4tNszATaYCQupJlLq4A1VwcuW
+TQxghvtqvLu82RZNL4FeFcBYB8635JSbBZD4xA3PGDhKzXNabudH/w1gKiuwbMI
tzvVH9BawnzwFwaXUBk7HoW8TsPIrMRQm8be3wIDAQABAoH/SYGTLzzNi1GNvZBP
d8TPnPmfxuJ+m959NS2WYijkn8kgrZzP7A7x018mHJKVH8vyAwGOttJqxyVXUmVe
wgcevXL5749eMsAi1yKhJps2rwol/65gOPeh5JKpPOVd2GohEyqw+PXvxvaxEFno
NY4euxYb1GsCoCoc3YJKgcSjflVr8L4isq7sXEQuM6xMf6L0/7KG4HsDb19hICLX
fUI8uRarNK4H6gjRKjCXMUmG6/HnJOrUJ032PxwOLac3t7RqqsLF6qmZHKuIz8Oe
wCyfZCoyvENRcdIifr54zXIxAHqUbJVHJG/D5nr/gur3J8l03fdtGVB3GiOuOMNh
S7yhAoGBAOKU4+Y8ntgJr2i9lCdfzYmnflkU1uKRCufT1mF9t0CzMwGER+9s+ihv
2X1ekQhHC648uQULK+g3Dl8uTboDx5GSQCkI3M9EG4bjLFujJYRO8y+Q+V5v01+0
dFzXeyjOkB9Fwro97upIdzAcMdUxHY0HQQyGP3eOnTZzXSEONq2ZAoGBAMLiBImz
zK24bNQK6xZUhDUq5JdyvJQdUFIrPiyJ312JEkfB7I7wlPLDpQtRgYV1AO48maxV
HmvNwvhQXc5BnuMSe2PaeMLC+UEWHX68Zz5AXR9x2pe0Uk792fMUKhcmdK3DPU5c
cw6v3VdUInkxgUPKum1YA1E/QwM40OHAYgs3AoGAVIY2fi0fFHiIdwpBum6Cvlc9
Sv37K4nwB4t+7d93/SrcXDR8oVSF/Y+8Eoi0keHu+ZCtdLQ2LOpc8iTT2hCO4j8s
sCIePTOrESat5YF2/WR2U8hBPnl44LrwrbG0wAROv1vGyLNR7RQbYlciP+WSoImU
OpfaFT+eZjGjDDHBNAECgYAmGF6AuIf7MYD8lkHMNKs/ZWoX/NLGNVC9LzzRIgZq
11+ebVcbvgWvyvTZWI50EyIib/AuUtlGg4toVPVxWzx+8N7z7wIKOGjXA0ayvouE
DLrnaa8sVpB8Zn0TWk68BcVrLi4uwj2vkks3RfgTLs0w/lEhDMJhQHeOCq4yYxQH
UwKBgGPn0Ov5/6OvCZoIyVaUS14zI1JaxcHVojG/XAyN3OWWCO10P7ZBjtJT2ZZA
ZlGk2TrwwIPD02vRboFohv9eY9n/r8iVGfZry3YSfnGL9zwF8NYAgWd8m5JKnNm2
Rk2xF+TH8+aLJWAMCAabjMJ7nuSdRX+Jrt0lA6ECfxYV/txR
-----END RSA PRIVATE KEY-----
";

/// `openssl ecparam -name prime256v1 -genkey`: SEC1 key after an EC PARAMETERS block.
pub(super) const EC_PARAMETERS_AND_SEC1: &str = "-----BEGIN EC PARAMETERS-----
BggqhkjOPQMBBw==
-----END EC PARAMETERS-----
-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIKq9GHoXDBdEms5ll4v2ulqQ0496+W/y35qj7HOShlP/oAoGCCqGSM49
AwEHoUQDQgAEQqcCLXuqJ3IG4JdcYUSLfs78hfabo8I5GMZGFDDbkMwDeYIwdp9H
zG+WBwDnRmQ7tDL1UO0oThd1azyxyygaPg==
-----END EC PRIVATE KEY-----
";

pub(super) fn sec1_key_pem() -> &'static str {
    let start = EC_PARAMETERS_AND_SEC1
        .find("-----BEGIN EC PRIVATE KEY")
        .unwrap_or(0);
    &EC_PARAMETERS_AND_SEC1[start..]
}

/// A PKCS#1 key with a `bits`-bit modulus: refused on its size before its numbers matter.
pub(super) fn fake_rsa_pkcs1(bits: usize) -> String {
    encode("RSA PRIVATE KEY", &fake_rsa_pkcs1_der(bits))
}

/// The DER of [`fake_rsa_pkcs1`]: `RSAPrivateKey { version 0, modulus 2^(bits-1), 65537 }`
/// (a size check reads no further).
pub fn fake_rsa_pkcs1_der(bits: usize) -> Vec<u8> {
    let modulus = BigUint::from(1u8) << bits.saturating_sub(1);
    // A DER INTEGER is signed: a high bit needs a 0x00 before it.
    let mut modulus = modulus.to_bytes_be();
    if modulus[0] & 0x80 != 0 {
        modulus.insert(0, 0);
    }
    let items = [
        0u32.to_der_vec(),
        Integer::new(&modulus).to_der_vec(),
        65_537u32.to_der_vec(),
    ];
    let items: Vec<u8> = items
        .into_iter()
        .flat_map(|item| item.expect("DER of an integer"))
        .collect();
    Sequence::new(items.into())
        .to_der_vec()
        .expect("DER of a sequence")
}
