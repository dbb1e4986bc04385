//! Small disks for programs that start local Basalt nodes (the integration tests, the jepsen
//! harness): a tmpfs per node slot, mounted in a user and mount namespace (`unshare -rm`, no
//! privilege needed) that a holder process keeps alive across the nodes' restarts. Nodes run in
//! it (`Volumes::command`), their `db`, `files` and `snapshots` directories on their slot's
//! tmpfs (`Volumes::place`: symlinks from a data dir that stays on the host, so the caller
//! reads its other files). `fill` and `empty` make a slot's disk full and free again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};

/// A tmpfs per node slot, mounted in a user and mount namespace that a holder process keeps
/// for the run; every node runs in it (`nsenter`), its `db`, `files` and `snapshots`
/// directories on its slot's tmpfs (symlinks from its data dir, which stays on the host).
pub struct Volumes {
    holder: Child,
    /// Mount points, one per slot.
    pub mounts: Vec<PathBuf>,
}

/// The name of the file `fill` fills a slot's tmpfs with.
const FILLER: &str = "basalt-filler";

impl Volumes {
    pub fn make(dir: &Path, slots: usize, mb: u64) -> anyhow::Result<Volumes> {
        let mounts: Vec<PathBuf> = (0..slots).map(|i| dir.join(format!("vol{i}"))).collect();
        for m in &mounts {
            std::fs::create_dir_all(m)?;
        }
        let script = format!(
            "for d; do mount -t tmpfs -o size={mb}m tmpfs \"$d\" || exit 1; done; echo ready; exec sleep 86400"
        );
        let mut holder = Command::new("unshare")
            .args(["-rm", "sh", "-c", &script, "sh"])
            .args(&mounts)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("unshare (util-linux)")?;
        let mut line = String::new();
        let stdout = holder.stdout.take().context("the holder's stdout")?;
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
        if line.trim() != "ready" {
            let _ = holder.kill();
            bail!("mounting the nodes' disks failed");
        }
        Ok(Volumes { holder, mounts })
    }

    /// The holder's process id: `nsenter -U -m -t <pid>` enters the volumes' namespace.
    pub fn holder_pid(&self) -> u32 {
        self.holder.id()
    }

    /// `program` to be run in the volumes' namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-U", "-m", "-t", &self.holder.id().to_string(), "--"])
            .arg(program);
        c
    }

    /// `args` run in the volumes' namespace.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("nsenter")
            .args(["-U", "-m", "-t", &self.holder.id().to_string(), "--"])
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!("{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Makes node `id`'s directories on slot `slot`'s tmpfs and links `data_dir` to them.
    pub fn place(&self, slot: usize, id: u64, data_dir: &Path) -> anyhow::Result<()> {
        let base = self.mounts.get(slot).context("no disk for that slot")?;
        std::fs::create_dir_all(data_dir)?;
        for sub in ["db", "files", "snapshots"] {
            let on_disk = base.join(format!("id{id}")).join(sub);
            self.run(&["mkdir", "-p", &on_disk.display().to_string()])?;
            std::os::unix::fs::symlink(&on_disk, data_dir.join(sub))?;
        }
        Ok(())
    }

    /// Bytes free on slot `slot`'s tmpfs.
    pub fn free(&self, slot: usize) -> anyhow::Result<u64> {
        let base = self.mounts.get(slot).context("no disk for that slot")?;
        let out = self.run(&["stat", "-f", "-c", "%a %S", &base.display().to_string()])?;
        let mut parts = out.split_whitespace().map(str::parse::<u64>);
        match (parts.next(), parts.next()) {
            (Some(Ok(blocks)), Some(Ok(size))) => Ok(blocks * size),
            _ => bail!("stat -f answered {out:?}"),
        }
    }

    /// Fills slot `slot`'s tmpfs until `leave` bytes are free; the bytes written.
    pub fn fill(&self, slot: usize, leave: u64) -> anyhow::Result<u64> {
        let free = self.free(slot)?;
        let bytes = free.saturating_sub(leave);
        let base = self.mounts.get(slot).context("no disk for that slot")?;
        let filler = base.join(FILLER).display().to_string();
        self.run(&["fallocate", "-l", &bytes.to_string(), &filler])?;
        Ok(bytes)
    }

    /// Removes every slot's filler.
    pub fn empty(&self) -> anyhow::Result<()> {
        for m in &self.mounts {
            self.run(&["rm", "-f", &m.join(FILLER).display().to_string()])?;
        }
        Ok(())
    }
}

impl Drop for Volumes {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}
