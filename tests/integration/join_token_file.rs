//! Issue 28 item 6: `--join-token-file`. A join token on the command line is in
//! `/proc/<pid>/cmdline`, which every local user can read; from a file, the hub joins alike
//! and the token is nowhere in its command line.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::Cloud;
use crate::support::hub::*;

const TOKEN_ID: &str = "abcdef";
const TOKEN_SECRET: &str = "0123456789abcdef";

#[test]
fn a_join_token_from_a_file_joins_and_stays_out_of_the_command_line() {
    let cloud = Cloud::start();
    // The cloud knows this token only: discovery and the CSR succeed with it alone.
    cloud.add_bootstrap_token(TOKEN_ID, TOKEN_SECRET);
    let dir = TempDir::new("join-token-file");
    let file = dir.path().join("join-token");
    // As the OpenWrt init writes it: one line, 0600.
    std::fs::write(&file, format!("{TOKEN_ID}.{TOKEN_SECRET}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let spec = HubSpec::bootstrap(
        dir.path(),
        &[
            &format!("--server-addr={}", cloud.url()),
            &format!("--join-token-file={}", file.display()),
            &format!("--discovery-token-ca-cert-hash={}", cloud.ca_pin()),
        ],
    );
    let hub = Hub::start(&spec);
    assert!(
        hub.wait_metric_at_least(
            "tinyhub_client_certificate_rotations_total",
            1.0,
            Duration::from_secs(30)
        ),
        "the hub joined with the file's token: {}",
        hub.logs()
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", hub.pid())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains("--join-token-file="), "{cmdline}");
    assert!(!cmdline.contains(TOKEN_SECRET), "{cmdline}");
    assert!(!hub.logs().contains(TOKEN_SECRET), "{}", hub.logs());
}
