// Copies the repository's one Functions library source into the package (build and
// `npm pack` time), so the package ships it without a second committed copy.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const src = path.resolve(__dirname, '..', '..', '..', 'lua', 'slidingwindow.lua');
const dest = path.resolve(__dirname, '..', 'lua', 'slidingwindow.lua');
if (!fs.existsSync(src)) {
  if (fs.existsSync(dest)) process.exit(0); // an unpacked package: already there
  console.error(`copy-lua: ${src} is missing`);
  process.exit(1);
}
fs.mkdirSync(path.dirname(dest), { recursive: true });
fs.copyFileSync(src, dest);
