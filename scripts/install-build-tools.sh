#!/usr/bin/env bash
# Installs the Debian tools foothold-build needs (root): mmdebstrap, GRUB's BIOS and UEFI images, systemd-boot,
# mkfs.ext4, mkfs.vfat and mtools, objcopy, qemu-img, zstd and xz, cpio (a ramdisk), patch (the patches a spec carries on a Go
# source), and for `foothold-build run` OVMF and qemu 10 or later (from bookworm-backports on bookworm:
# scripts/lib/common.sh says why). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/common.sh
on_error install-build-tools
apt_need mmdebstrap:mmdebstrap /usr/lib/grub/i386-pc/boot.img:grub-pc-bin \
  /usr/lib/grub/x86_64-efi/linux.mod:grub-efi-amd64-bin grub-mkimage:grub-common \
  /usr/lib/systemd/boot/efi/systemd-bootx64.efi:systemd-boot-efi mkfs.ext4:e2fsprogs mkfs.vfat:dosfstools \
  mcopy:mtools objcopy:binutils sfdisk:fdisk \
  /usr/share/OVMF/OVMF_CODE_4M.fd:ovmf xorriso:xorriso mksquashfs:squashfs-tools zstd:zstd xz:xz-utils cpio:cpio patch:patch
qemu_need
