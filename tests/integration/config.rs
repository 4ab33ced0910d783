//! `--config FILE`: settings from a TOML file keyed by flag name, below flags and
//! environment variables; unknown keys are refused with the list of keys.

use crate::common;

use std::process::Command;

#[test]
fn serve_reads_a_config_file_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("toolgate.toml");
    let (file_port, flag_port) = (common::server::free_port(), common::server::free_port());
    std::fs::write(
        &config,
        format!(
            "model = {:?}\ntool_fallback = \"generic\"\nport = {file_port}\nmax-queue = 3\n",
            common::model(common::SMOLLM2).display().to_string()
        ),
    )
    .unwrap();
    // Everything from the file: the model (gated with the generic fallback) and the port.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["serve", "--config"]).arg(&config).env_remove("TOOLGATE_PORT").env_remove("TOOLGATE_MODEL");
    let ok = common::server::spawn(cmd, file_port).is_some();
    assert!(ok, "the server did not come up on the config file's port");
    // A flag beats the file.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.args(["serve", "--port", &flag_port.to_string()])
        .env("TOOLGATE_CONFIG", &config)
        .env_remove("TOOLGATE_PORT")
        .env_remove("TOOLGATE_MODEL");
    let ok = common::server::spawn(cmd, flag_port).is_some();
    assert!(ok, "--port did not win over the config file");
}

#[test]
fn unknown_keys_and_bad_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    for (text, needle) in [
        ("prot = 8080\n", "unknown key `prot`"),
        ("stop = [\"a\"]\n", "unknown key `stop`"),
        ("port = [1, 2]\n", "`port` must be a string, number or boolean"),
        ("port = \n", "not valid TOML"),
    ] {
        std::fs::write(&config, text).unwrap();
        let out =
            Command::new(env!("CARGO_BIN_EXE_toolgate")).args(["serve", "--config"]).arg(&config).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(needle), "{text}: {err}");
    }
}
