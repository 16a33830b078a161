// The browser clients under test, bundled by esbuild into one script (an IIFE) at test time:
// window.zarrita is zarrita.js, window.omezarr is ome-zarr.js (with its own zarrita).
import * as zarrita from "zarrita";
import * as omezarr from "ome-zarr.js";

window.zarrita = zarrita;
window.omezarr = omezarr;
