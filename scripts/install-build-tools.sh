#!/usr/bin/env bash
# Installs the Debian tools foothold-build needs (root): mmdebstrap, GRUB's BIOS and UEFI images, systemd-boot,
# mkfs.ext4, mkfs.vfat and mtools, objcopy, qemu-img, zstd and xz, patch (the patches a spec carries on a Go
# source), and for `foothold-build run` qemu and OVMF. Idempotent.
set -euo pipefail
need=()
check() { # <path or command> <package>
  case "$1" in
    /*) [ -e "$1" ] || need+=("$2") ;;
    *) command -v "$1" >/dev/null 2>&1 || need+=("$2") ;;
  esac
}
check mmdebstrap mmdebstrap
check /usr/lib/grub/i386-pc/boot.img grub-pc-bin
check /usr/lib/grub/x86_64-efi/linux.mod grub-efi-amd64-bin
check grub-mkimage grub-common
check /usr/lib/systemd/boot/efi/systemd-bootx64.efi systemd-boot-efi
check mkfs.ext4 e2fsprogs
check mkfs.vfat dosfstools
check mcopy mtools
check objcopy binutils
check sfdisk fdisk
check qemu-img qemu-utils
check qemu-system-x86_64 qemu-system-x86
check /usr/share/OVMF/OVMF_CODE_4M.fd ovmf
check xorriso xorriso
check mksquashfs squashfs-tools
check zstd zstd
check xz xz-utils
check patch patch
if [ ${#need[@]} -gt 0 ]; then
  echo "install-build-tools: apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
