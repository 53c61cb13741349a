//! Linking a session up with its data nodes, and setting up the data channel on them
//! (SPAS/PASV, SPOR/PORT).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferry_dtp::PassiveRequest;
use tokio::task::JoinSet;

use super::{NodeLogin, NodeSet, RemoteDtp};
use crate::striped::ipc::{FromNode, Link, ToNode, IPC_VERSION};

impl RemoteDtp {
    /// Links up with every node not yet linked (in parallel; links started at login are
    /// awaited) and returns those that answer.
    async fn link_all(&mut self) -> Vec<usize> {
        let mut set = JoinSet::new();
        for i in 0..self.links.len() {
            if self.links[i].is_some() {
                continue;
            }
            let started = self.pending[i].take();
            let (node, nodes, login) = (
                self.set.nodes[i].clone(),
                Arc::clone(&self.set),
                self.login.clone(),
            );
            set.spawn(async move { (i, finish_link(started, &node, &nodes, &login).await) });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((i, r)) = joined else { continue };
            match r {
                Ok(link) => {
                    self.set.mark(i, None);
                    self.links[i] = Some(link);
                }
                Err(e) => self.set.mark(i, Some(e)),
            }
        }
        (0..self.links.len())
            .filter(|i| self.links[*i].is_some())
            .collect()
    }

    /// Links up with one node, trying them in turn from a rotating start.
    async fn link_one(&mut self) -> Option<usize> {
        let n = self.links.len();
        let start = self.set.next.fetch_add(1, Ordering::Relaxed) as usize;
        for k in 0..n {
            let i = (start + k) % n;
            if self.links[i].is_some() {
                return Some(i);
            }
            let started = self.pending[i].take();
            let r = finish_link(started, &self.set.nodes[i], &self.set, &self.login).await;
            match r {
                Ok(link) => {
                    self.set.mark(i, None);
                    self.links[i] = Some(link);
                    return Some(i);
                }
                Err(e) => self.set.mark(i, Some(e)),
            }
        }
        None
    }

    fn none_reachable(&self) -> String {
        let why = self.set.missing_note();
        format!("No data node is reachable.{why}")
    }

    /// `SPAS` (`striped`: one listener on every node) or `PASV`/`EPSV` (one node): the
    /// listeners' addresses in stripe order.
    pub(super) async fn passive(&mut self, req: PassiveRequest) -> Result<Vec<SocketAddr>, String> {
        let PassiveRequest {
            striped,
            tuning,
            stack,
            admit_only,
            ..
        } = req;
        self.cached = None;
        self.using.clear();
        let candidates = if striped {
            self.link_all().await
        } else {
            self.link_one().await.into_iter().collect()
        };
        // Every node gets its request before any answer is read: one round trip in all.
        let mut asked = Vec::new();
        for i in candidates {
            let msg = ToNode::OpenPassive {
                tuning,
                stack: stack.clone(),
                admit_only,
            };
            match self.tell(i, &msg).await {
                Ok(()) => asked.push(i),
                Err(e) => self.lost(i, e),
            }
        }
        let mut addrs = Vec::new();
        for i in asked {
            match self.answer(i).await {
                // A node is one stripe: it listens once.
                Ok(FromNode::Passive(a)) if a.len() == 1 => {
                    self.using.push(i);
                    addrs.extend(a);
                }
                Ok(FromNode::PassiveFailed(e)) => {
                    tracing::warn!(node = %self.set.nodes[i], "passive listener failed: {e}");
                }
                Ok(other) => self.lost(i, format!("unexpected answer {other:?}")),
                Err(e) => self.lost(i, e),
            }
        }
        if addrs.is_empty() {
            return Err(self.none_reachable());
        }
        Ok(addrs)
    }

    /// `PORT`/`SPOR` with `count` addresses: every reachable node takes part when there are
    /// several receiving stripes, one node otherwise.
    pub(super) async fn active(&mut self, count: usize) -> Result<(), String> {
        self.cached = None;
        self.using.clear();
        let candidates = if count > 1 {
            self.link_all().await
        } else {
            self.link_one().await.into_iter().collect()
        };
        // Forget needs no answer: the node handles its messages in order, so the next Run
        // finds the old listener and connections gone.
        for i in candidates {
            match self.tell(i, &ToNode::SetActive).await {
                Ok(()) => self.using.push(i),
                Err(e) => self.lost(i, e),
            }
        }
        if self.using.is_empty() {
            return Err(self.none_reachable());
        }
        Ok(())
    }

    /// Sends one message to node `i`.
    async fn tell(&mut self, i: usize, msg: &ToNode) -> Result<(), String> {
        let link = self.links[i].as_mut().ok_or("not linked")?;
        tokio::time::timeout(self.set.timeout, link.wr.send(msg))
            .await
            .map_err(|_| format!("no progress within {} s", self.set.timeout.as_secs()))?
            .map_err(|e| e.to_string())
    }

    /// Reads node `i`'s next answer.
    async fn answer(&mut self, i: usize) -> Result<FromNode, String> {
        let link = self.links[i].as_mut().ok_or("not linked")?;
        match tokio::time::timeout(self.set.timeout, link.rd.recv::<FromNode>()).await {
            Err(_) => Err(format!("no answer within {} s", self.set.timeout.as_secs())),
            Ok(Ok(Some(m))) => Ok(m),
            Ok(Ok(None)) => Err("closed the link".to_string()),
            Ok(Err(e)) => Err(e.to_string()),
        }
    }

    /// Drops node `i`'s link after it failed and remembers why.
    pub(super) fn lost(&mut self, i: usize, why: String) {
        self.links[i] = None;
        self.using.retain(|u| *u != i);
        self.set.mark(i, Some(why));
    }
}

/// The link a login started, or (none started, or it failed: the node may be back) a new one.
async fn finish_link(
    started: Option<tokio::task::JoinHandle<Result<Link, String>>>,
    node: &str,
    set: &NodeSet,
    login: &NodeLogin,
) -> Result<Link, String> {
    if let Some(h) = started {
        if let Ok(Ok(link)) = h.await {
            return Ok(link);
        }
    }
    hello(node, set, login).await
}

/// Connects to a node and introduces the session.
pub(super) async fn hello(node: &str, set: &NodeSet, login: &NodeLogin) -> Result<Link, String> {
    let mut link = Link::connect(node, &set.auth, set.timeout).await?;
    let msg = ToNode::Hello {
        version: IPC_VERSION,
        account: login.account.clone(),
        read_only: login.read_only,
        delegated_pem: login.delegated_pem.clone(),
    };
    let answer = async {
        link.wr.send(&msg).await.map_err(|e| e.to_string())?;
        link.rd.recv::<FromNode>().await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(set.timeout, answer).await {
        Ok(Ok(Some(FromNode::Ready))) => Ok(link),
        Ok(Ok(Some(FromNode::Refused(why)))) => Err(format!("refused the session: {why}")),
        Ok(Ok(Some(other))) => Err(format!("unexpected answer {other:?}")),
        Ok(Ok(None)) => Err("closed the link (wrong IPC secret or not allowed?)".into()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("no answer within {} s", set.timeout.as_secs())),
    }
}
