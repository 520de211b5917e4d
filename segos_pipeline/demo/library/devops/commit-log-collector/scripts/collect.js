#!/usr/bin/env node
const { execFileSync } = require("child_process");

const range = process.argv[2] ||
  `${execFileSync("git", ["describe", "--tags", "--abbrev=0"]).toString().trim()}..HEAD`;
const raw = execFileSync("git", ["log", "--no-merges", "--format=%H%x1f%s%x1f%b%x1f%an%x1e", range]).toString();
const re = /^(\w+)(?:\(([^)]+)\))?(!)?:\s*(.+)$/;

const commits = raw.split("\x1e").map((r) => r.trim()).filter(Boolean).map((rec) => {
  const [sha, subject, body, author] = rec.split("\x1f");
  const m = subject.match(re);
  const pr = (subject.match(/\(#(\d+)\)\s*$/) || [])[1];
  return {
    sha: sha.slice(0, 12),
    type: m ? m[1].toLowerCase() : "other",
    scope: m ? m[2] || null : null,
    subject: m ? m[4] : subject,
    breaking: Boolean(m && m[3]) || /BREAKING CHANGE:/.test(body || ""),
    pr: pr ? Number(pr) : null,
    author,
  };
});
process.stdout.write(JSON.stringify(commits, null, 2));
