"""torch.fft (and stft) on the device: the _fft_r2c/_fft_c2c/_fft_c2r lowerings vs CPU, natively."""
import pytest
import torch

from helpers import DEV, assert_same, native_only


def _x(dtype, shape=(4, 6, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, dtype=dtype, generator=g)


FFTS = [
    ("fft", lambda x: torch.fft.fft(x), torch.complex64),
    ("fft_of_real", lambda x: torch.fft.fft(x), torch.float32),
    ("fft_n_pad", lambda x: torch.fft.fft(x, n=9, dim=1), torch.complex64),
    ("fft_n_trim", lambda x: torch.fft.fft(x, n=3, dim=0), torch.complex128),
    ("ifft_ortho", lambda x: torch.fft.ifft(x, norm="ortho"), torch.complex64),
    ("fft2_forward", lambda x: torch.fft.fft2(x, norm="forward"), torch.complex64),
    ("fftn_s", lambda x: torch.fft.fftn(x, s=(3, 8)), torch.complex64),
    ("fftn_all_4d", lambda x: torch.fft.fftn(x[None].expand(2, 4, 6, 5)), torch.complex64),
    ("ifftn", lambda x: torch.fft.ifftn(x, dim=(0, 2)), torch.complex128),
    ("rfft", lambda x: torch.fft.rfft(x), torch.float64),
    ("rfft2_ortho", lambda x: torch.fft.rfft2(x, norm="ortho"), torch.float32),
    ("rfftn", lambda x: torch.fft.rfftn(x, dim=(0, 1)), torch.float32),
    ("irfft", lambda x: torch.fft.irfft(x), torch.complex64),
    ("irfft_n", lambda x: torch.fft.irfft(x, n=7, norm="forward"), torch.complex64),
    ("irfftn_s", lambda x: torch.fft.irfftn(x, s=(5, 7)), torch.complex64),
    ("hfft", lambda x: torch.fft.hfft(x), torch.complex64),
    ("ihfft", lambda x: torch.fft.ihfft(x), torch.float32),
    ("fftshift", lambda x: torch.fft.ifftshift(torch.fft.fftshift(torch.fft.fft(x), dim=(1, 2))), torch.complex64),
    ("transposed_input", lambda x: torch.fft.fft(x.transpose(0, 2)), torch.complex64),
]


@pytest.mark.parametrize("name,fn,dtype", FFTS, ids=[f[0] for f in FFTS])
def test_fft(name, fn, dtype):
    x = _x(dtype)
    expected = fn(x)
    with native_only():
        got = fn(x.to(DEV))
    tol = 1e-10 if dtype in (torch.float64, torch.complex128) else 1e-4
    assert_same(got, expected, atol=tol, rtol=tol)


def test_stft_istft_roundtrip():
    sig = _x(torch.float32, (2, 64))
    win = torch.hann_window(16)
    expected = torch.stft(sig, 16, hop_length=4, window=win, return_complex=True)
    with native_only():
        got = torch.stft(sig.to(DEV), 16, hop_length=4, window=win.to(DEV), return_complex=True)
        back = torch.istft(got, 16, hop_length=4, window=win.to(DEV), length=64)
    assert_same(got, expected, atol=1e-4, rtol=1e-4)
    assert_same(back, sig, atol=1e-4, rtol=1e-4)


def test_fft_gradients():
    x = _x(torch.float32, (6, 8)).requires_grad_()
    xd = x.detach().to(DEV).requires_grad_()

    def f(t):
        return torch.fft.irfft(torch.fft.rfft(t) * 1.5j, n=8).pow(2).sum() + torch.fft.fft2(t).abs().sum()

    f(x).backward()
    with native_only():
        f(xd).backward()
    assert_same(xd.grad, x.grad, atol=1e-4, rtol=1e-4)
