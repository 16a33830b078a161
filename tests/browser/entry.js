// The browser clients under test, bundled by esbuild into one script (an IIFE) at test time:
// window.zarrita is zarrita.js, window.omezarr is ome-zarr.js (with its own zarrita), and
// window.zarrjs is zarr.js (the older client, Zarr v2 only).
import * as zarrita from "zarrita";
import * as omezarr from "ome-zarr.js";
import * as zarrjs from "zarr";

window.zarrita = zarrita;
window.omezarr = omezarr;
window.zarrjs = zarrjs;
