//! A plain `std::fs` disk for offline tools (the WAL inspector), which run
//! outside any glommio executor. Buffered I/O; fine for reading and for the
//! rare repair write, not for serving.

use super::{Disk, DiskFile};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::rc::Rc;

#[derive(Clone)]
pub struct StdDisk {
    dir: Rc<PathBuf>,
}

impl StdDisk {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StdDisk {
            dir: Rc::new(dir.into()),
        }
    }
}

pub struct StdFile(File);

impl Disk for StdDisk {
    type File = StdFile;

    async fn create(&self, name: &str) -> io::Result<StdFile> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.dir.join(name))
            .map(StdFile)
    }

    async fn open(&self, name: &str) -> io::Result<StdFile> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.dir.join(name))
            .map(StdFile)
    }

    async fn list(&self) -> io::Result<Vec<String>> {
        super::list_files(&self.dir)
    }

    async fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))
    }

    async fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    async fn shrink(&self, name: &str, len: u64) -> io::Result<()> {
        OpenOptions::new().write(true).open(self.dir.join(name))?.set_len(len)
    }

    async fn sync_dir(&self) -> io::Result<()> {
        File::open(&*self.dir)?.sync_all()
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl DiskFile for StdFile {
    fn alignment(&self) -> u64 {
        512
    }

    async fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        self.0.write_all_at(data, pos)
    }

    async fn read_at(&self, pos: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = self.0.read_at(&mut buf[got..], pos + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok(buf)
    }

    async fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    async fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    async fn allocate(&self, len: u64) -> io::Result<()> {
        if self.0.metadata()?.len() < len {
            self.0.set_len(len)?;
        }
        Ok(())
    }
}
