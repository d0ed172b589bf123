//! Every request-body parser on arbitrary bytes: refuse with an Azure error
//! or parse, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = server::xmlio::parse_message_text(data);
    let _ = server::xmlio::parse_signed_identifiers(data);
    let _ = server::service::ServiceProperties::default().merge(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = server::xmlio::parse_iso8601(s);
    }
});
