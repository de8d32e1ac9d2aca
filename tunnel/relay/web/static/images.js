// Images pasted or dropped into the composer, sent with the next prompt (docs/web.md, "Images
// in a prompt"): at most MAX_PROMPT_IMAGES, MAX_PROMPT_IMAGE_BYTES together, as the host takes
// them. A picture larger than what is left of the budget, or of a type the host does not take,
// is drawn again as a smaller JPEG until it fits.

import { el } from "./dom.js";
import { MAX_PROMPT_IMAGE_BYTES, MAX_PROMPT_IMAGES, PROMPT_IMAGE_TYPES } from "./wire.js";

const LARGEST_SIDE = 2048;
const SHRINK_STEPS = 6;

async function bytesOf(blob) {
  return new Uint8Array(await blob.arrayBuffer());
}

function dataUrl({ mime_type: type, data }) {
  let binary = "";
  for (let start = 0; start < data.length; start += 0x8000) {
    binary += String.fromCharCode(...data.subarray(start, start + 0x8000));
  }
  return `data:${type};base64,${btoa(binary)}`;
}

/** `file` as {mime_type, data} within `budget` bytes, scaled down as needed; null if it cannot. */
async function fitted(file, budget) {
  if (PROMPT_IMAGE_TYPES.includes(file.type) && file.size <= budget) {
    return { mime_type: file.type, data: await bytesOf(file) };
  }
  let bitmap;
  try {
    bitmap = await createImageBitmap(file);
  } catch {
    return null;
  }
  let scale = Math.min(1, LARGEST_SIDE / Math.max(bitmap.width, bitmap.height));
  for (let step = 0; step < SHRINK_STEPS; step += 1) {
    const canvas = document.createElement("canvas");
    canvas.width = Math.max(1, Math.round(bitmap.width * scale));
    canvas.height = Math.max(1, Math.round(bitmap.height * scale));
    canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/jpeg", 0.85));
    if (blob && blob.size <= budget) return { mime_type: "image/jpeg", data: await bytesOf(blob) };
    scale /= 2;
  }
  return null;
}

export class PromptImages {
  /** `onError(text)` says why an image was not taken. */
  constructor({ onError }) {
    this.onError = onError;
    this.images = [];
    this.element = el("div", { class: "prompt-images", testid: "prompt-images", hidden: true });
  }

  /** Take the image files among `files` (a paste's or a drop's); whether any was an image. */
  addFiles(files) {
    const pictures = [...files].filter((file) => file.type.startsWith("image/"));
    for (const file of pictures) this.add(file);
    return pictures.length > 0;
  }

  async add(file) {
    if (this.images.length >= MAX_PROMPT_IMAGES) {
      this.onError(`At most ${MAX_PROMPT_IMAGES} images go with one prompt.`);
      return;
    }
    const left = MAX_PROMPT_IMAGE_BYTES - this.images.reduce((sum, image) => sum + image.data.length, 0);
    const image = left > 0 ? await fitted(file, left) : null;
    if (!image) {
      this.onError("The image could not be made small enough to send with this prompt.");
      return;
    }
    this.images.push(image);
    this.render();
  }

  /** The images to send, as the prompt request carries them. */
  list() {
    return this.images.map(({ mime_type, data }) => ({ mime_type, data }));
  }

  clear() {
    this.images = [];
    this.render();
  }

  render() {
    this.element.hidden = this.images.length === 0;
    this.element.replaceChildren(...this.images.map((image, index) => {
      // A data: URL, as the page's CSP allows images from nowhere else.
      const thumb = el("img", { src: dataUrl(image), alt: `image ${index + 1}`, testid: "prompt-image" });
      return el("span", { class: "prompt-image" }, thumb,
        el("button", { type: "button", class: "remove", text: "×", title: "Remove this image",
          "aria-label": `Remove image ${index + 1}`, testid: "prompt-image-remove",
          onclick: () => { this.images.splice(index, 1); this.render(); } }));
    }));
  }
}
